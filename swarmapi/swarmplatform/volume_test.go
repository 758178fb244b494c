package swarmplatform

import (
	"slices"
	"strings"
	"testing"

	"plug/swarmapi"
	"plug/tunnel"
)

// volumeOf asks p for what the service name mounts at target.
func volumeOf(p *Platform, name, target string) (tunnel.Volume, error) {
	return p.ServeVolume(bg, tunnel.VolumeRequest{Kind: tunnel.WorkloadService, Name: name, Volume: target, Holder: holder("run-1")})
}

// helperSpecs are the specs of the volume helpers in the swarm.
func (f *fakeSwarm) helperSpecs(t *testing.T) []swarmapi.ServiceSpec {
	t.Helper()
	helpers, err := f.c.Services(bg, map[string][]string{"label": {labelVolume}})
	if err != nil {
		t.Fatal(err)
	}
	var specs []swarmapi.ServiceSpec
	for _, h := range helpers {
		specs = append(specs, h.Spec)
	}
	return specs
}

// A helper mounts what the workload mounts at the path asked for, on the
// node of its task, as its user with every capability dropped; a root
// workload's helper serves as the mount root's owner with SETUID and
// SETGID alone. What another container cannot share is refused with the
// reason, and nothing is made.
func TestVolumeHelperOfAService(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	spec := f.serviceSpec("files", 1)
	spec.TaskTemplate.ContainerSpec.User = "1000:2000"
	spec.TaskTemplate.ContainerSpec.Groups = []string{"3000"}
	spec.TaskTemplate.ContainerSpec.Mounts = []swarmapi.Mount{
		{Type: "volume", Source: "files-data", Target: "/data/"},
		{Type: "volume", Target: "/cache"},
		{Type: "tmpfs", Target: "/scratch"},
		{Type: "bind", Source: "/srv/conf", Target: "/conf", ReadOnly: true},
	}
	id := f.create(t, spec)
	node := f.runningTask(t, id).NodeID

	for target, why := range map[string]string{
		"/scratch": "a tmpfs mount lives in its task's container's memory",
		"/cache":   "its volume is anonymous",
		"/nothing": "mounts nothing at /nothing; its mounts: /data/, /cache, /scratch, /conf",
	} {
		at := f.Index()
		if _, err := volumeOf(p, "files", target); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want it refused saying %q", target, err, why)
		}
		f.unchanged(t, at, "the refused "+target)
	}
	if _, err := p.ServeVolume(bg, tunnel.VolumeRequest{Kind: tunnel.WorkloadDeployment, Name: "files", Volume: "/data"}); err == nil || !strings.Contains(err.Error(), "service/files:/data") {
		t.Errorf("a deployment on Swarm: %v, want a refusal naming service/files:/data", err)
	}

	v, err := volumeOf(p, "files", "/data")
	if err != nil {
		t.Fatal(err)
	}
	if v.Port != 445 || v.Share != "volume" || v.ReadOnly || !strings.Contains(v.Detail, "volume files-data, on node "+node+", as uid 1000 gid 2000 (read in its container files.1.") {
		t.Errorf("the volume: %+v", v)
	}
	specs := f.helperSpecs(t)
	if len(specs) != 1 {
		t.Fatalf("%d helpers, want 1", len(specs))
	}
	h := specs[0]
	cs := h.TaskTemplate.ContainerSpec
	switch {
	case h.Name != v.Host || h.Labels[labelVolume] != "service/files:/data" || cs.Labels[labelVolume] != "service/files:/data" || h.Labels[labelExpose] != "445":
		t.Errorf("the helper's name and labels: %s %v", h.Name, h.Labels)
	case cs.Image != fakeAgentImage || !slices.Equal(cs.Args, []string{"smb", "--addr", ":445", "--share", "volume", "/volume"}):
		t.Errorf("the helper runs %s %v, want the agent's image serving /volume", cs.Image, cs.Args)
	case cs.User != "1000:2000" || !slices.Equal(cs.Groups, []string{"3000"}) || !slices.Equal(cs.CapabilityDrop, []string{"ALL"}) || len(cs.CapabilityAdd) > 0:
		t.Errorf("the helper runs as %q groups %v, capabilities -%v +%v", cs.User, cs.Groups, cs.CapabilityDrop, cs.CapabilityAdd)
	case len(cs.Mounts) != 1 || cs.Mounts[0].Type != "volume" || cs.Mounts[0].Source != "files-data" || cs.Mounts[0].Target != "/volume":
		t.Errorf("the helper mounts %+v, want the volume files-data at /volume", cs.Mounts)
	case h.TaskTemplate.Placement == nil || !slices.Equal(h.TaskTemplate.Placement.Constraints, []string{"node.id==" + node}):
		t.Errorf("the helper is placed %+v, want on node %s", h.TaskTemplate.Placement, node)
	case !slices.Contains(cs.Env, "PLUG_SMB_PASSWORD="+v.Password):
		t.Errorf("the helper does not take the volume's password")
	}
	if _, err := p.Env(bg, tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: v.Host}); err == nil {
		t.Errorf("the helper's environment, which holds its password, was given")
	}
	if err := p.ReleaseVolume(bg, v.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(f.helperSpecs(t)); n != 0 {
		t.Errorf("%d helpers left after ReleaseVolume", n)
	}
	if err := p.ReleaseVolume(bg, v.ID); err != nil {
		t.Errorf("releasing a helper that is gone: %v", err)
	}

	// A volume the workload writes, asked read-only (PLUG_OPEN_VOLUMES).
	v, err = p.ServeVolume(bg, tunnel.VolumeRequest{Kind: tunnel.WorkloadService, Name: "files", Volume: "/data", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if specs := f.helperSpecs(t); !v.ReadOnly || !strings.HasSuffix(v.Detail, ", read-only") || len(specs) != 1 || !specs[0].TaskTemplate.ContainerSpec.Mounts[0].ReadOnly {
		t.Errorf("a volume asked read-only: %+v, helpers %d", v, len(specs))
	}
	if err := p.ReleaseVolume(bg, v.ID); err != nil {
		t.Fatal(err)
	}

	// A read-only bind mount of a root workload.
	root := f.serviceSpec("root", 1)
	root.TaskTemplate.ContainerSpec.Mounts = []swarmapi.Mount{{Type: "bind", Source: "/srv/conf", Target: "/conf", ReadOnly: true}}
	f.create(t, root)
	v, err = volumeOf(p, "root", "/conf")
	if err != nil {
		t.Fatal(err)
	}
	if !v.ReadOnly || !strings.Contains(v.Detail, "bind mount /srv/conf") || !strings.Contains(v.Detail, "read-only, as the owner of the mount's root: the workload runs as root") {
		t.Errorf("the root workload's volume: %+v", v)
	}
	cs = f.helperSpecs(t)[0].TaskTemplate.ContainerSpec
	if cs.User != "0:0" || !slices.Contains(cs.Args, "--as-owner") || !slices.Equal(cs.CapabilityAdd, []string{"CAP_SETUID", "CAP_SETGID"}) || !cs.Mounts[0].ReadOnly {
		t.Errorf("the root workload's helper: user %q args %v capabilities +%v mounts %+v", cs.User, cs.Args, cs.CapabilityAdd, cs.Mounts)
	}
}

// The sweep removes the helpers of an agent whose task is gone, and leaves
// those of a live agent.
func TestSweepRemovesTheVolumeHelpersOfAGoneAgent(t *testing.T) {
	f := newFakeSwarm(t)
	spec := f.serviceSpec("files", 1)
	spec.TaskTemplate.ContainerSpec.Mounts = []swarmapi.Mount{{Type: "volume", Source: "files-data", Target: "/data"}}
	f.create(t, spec)
	gone := f.agent(t, "agent_a", nil)
	live := f.agent(t, "agent_b", nil)
	if _, err := volumeOf(gone, "files", "/data"); err != nil {
		t.Fatal(err)
	}
	kept, err := volumeOf(live, "files", "/data")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.c.RemoveService(bg, "agent_a"); err != nil {
		t.Fatal(err)
	}
	if err := live.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	specs := f.helperSpecs(t)
	if len(specs) != 1 || specs[0].Name != kept.Host {
		t.Errorf("after the sweep: %d helpers, want only %s", len(specs), kept.Host)
	}
}
