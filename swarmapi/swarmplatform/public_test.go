package swarmplatform

import (
	"strings"
	"testing"

	"plug/swarmapi"
)

// publishingAgent runs an agent service called name publishing ports, on
// a node that advertises nodeAddr, and returns its Platform.
func (f *fakeSwarm) publishingAgent(t *testing.T, name, nodeAddr string, ports ...swarmapi.PortConfig) *Platform {
	t.Helper()
	f.SetSwarm(swarmapi.SwarmInfo{NodeID: f.NodeID, NodeAddr: nodeAddr, LocalNodeState: "active", ControlAvailable: true})
	id := f.create(t, swarmapi.ServiceSpec{
		Name:         name,
		TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{Image: fakeAgentImage, Args: []string{"agent"}}, Networks: []swarmapi.NetworkAttachmentConfig{{Target: "app"}}},
		Mode:         replicated(1),
		EndpointSpec: &swarmapi.EndpointSpec{Ports: ports},
	})
	opts, err := agentOptions(bg, f.c, f.runningTask(t, id).ID)
	if err != nil {
		t.Fatal(err)
	}
	return newPlatform(t, opts)
}

// The installer's address is the port the agent's service publishes for
// the agent's port, on the address the node advertises, and it says so.
func TestPublicAddrIsThePublishedPortOnTheNodesAddress(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.publishingAgent(t, "plug_agent", "192.0.2.7",
		swarmapi.PortConfig{Protocol: "udp", TargetPort: 2222, PublishedPort: 5353},
		swarmapi.PortConfig{Protocol: "tcp", TargetPort: 9000, PublishedPort: 9000},
		swarmapi.PortConfig{Protocol: "tcp", TargetPort: 2222, PublishedPort: 32222, PublishMode: "host"})
	addr, how, err := p.PublicAddr(bg, 2222)
	if err != nil || addr != "192.0.2.7:32222" {
		t.Fatalf("PublicAddr: %q, %v; want 192.0.2.7:32222", addr, err)
	}
	if want := "service plug_agent publishes port 32222 in host mode, and this agent's node advertises 192.0.2.7 to the swarm"; how != want {
		t.Errorf("how: %q\nwant %q", how, want)
	}
}

func TestPublicAddrSaysWhatIsMissing(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.publishingAgent(t, "plug_agent", "192.0.2.7", swarmapi.PortConfig{Protocol: "tcp", TargetPort: 9000, PublishedPort: 9000})
	if _, _, err := p.PublicAddr(bg, 2222); err == nil || !strings.Contains(err.Error(), "service plug_agent publishes no port for the agent's port 2222") {
		t.Errorf("without a published port: %v", err)
	}

	p = f.publishingAgent(t, "other_agent", "0.0.0.0", swarmapi.PortConfig{TargetPort: 2222, PublishedPort: 2222})
	if _, _, err := p.PublicAddr(bg, 2222); err == nil || !strings.Contains(err.Error(), "advertises no address") {
		t.Errorf("a node without an address: %v", err)
	}

	if _, _, err := newPlatform(t, Options{Client: f.c}).PublicAddr(bg, 2222); err == nil || !strings.Contains(err.Error(), "not run as a swarm service") {
		t.Errorf("an agent that is no swarm task: %v", err)
	}
}
