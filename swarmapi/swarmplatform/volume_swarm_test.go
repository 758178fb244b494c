//go:build linux

package swarmplatform

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// The uid and gid the test's workload runs as.
const filesUID = "1000"

// helpersOf lists the volume helpers serving what spec names
// ("service/NAME:/data").
func (s *testSwarm) helpersOf(t *testing.T, spec string) []swarmapi.Service {
	t.Helper()
	helpers, err := s.c.Services(context.Background(), map[string][]string{"label": {labelVolume + "=" + spec}})
	if err != nil {
		t.Fatal(err)
	}
	return helpers
}

// helperContainers lists the containers of volume helpers serving spec
// that run, or, with all, that exist.
func (s *testSwarm) helperContainers(t *testing.T, spec string, all bool) string {
	t.Helper()
	flag := "-q"
	if all {
		flag = "-aq"
	}
	out, err := exec.Command(s.docker, "ps", flag, "--filter", "label="+labelVolume+"="+spec).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// awaitNoHelpers waits up to within for the helper services of spec to
// be gone and their containers to have stopped (or, with removed, to be
// removed too).
func (s *testSwarm) awaitNoHelpers(t *testing.T, spec string, within time.Duration, removed bool) {
	t.Helper()
	clustertest.Eventually(t, within, "the volume helpers of "+spec+" gone", func() error {
		if n := len(s.helpersOf(t, spec)); n > 0 {
			return fmt.Errorf("%d helper services left", n)
		}
		if left := s.helperContainers(t, spec, removed); left != "" {
			return fmt.Errorf("helper containers left: %s", left)
		}
		return nil
	})
}

// shareThrough opens a port on 127.0.0.1 whose connections sess carries to
// the helper of v, as plug --volume does, and returns it.
func shareThrough(t *testing.T, sess *tunnel.Session, v tunnel.Volume) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				if err := sess.Carry(context.Background(), c, net.JoinHostPort(v.Host, strconv.Itoa(v.Port))); err != nil {
					c.Close()
				}
			}()
		}
	}()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// smbclient runs smbclient commands on the share of v at port, in dir.
func smbclient(v tunnel.Volume, port, dir, commands string) (string, error) {
	c := exec.Command("smbclient", "//127.0.0.1/"+v.Share, "-p", port, "-U", v.User+"%"+v.Password, "-m", "SMB3", "-c", commands)
	c.Dir = dir
	out, err := c.CombinedOutput()
	return string(out), err
}

// Acceptance 1 of Swarm at parity: a service running as uid 1000 with a
// bind mount at /data has it served to the run by the deployed agent; a
// file smbclient writes through the run is what the task reads, owned by
// its uid; its tmpfs is refused with the reason; the helper is gone within
// 5 s of the run's end, and after the agent is killed its next task sweeps
// the helper the killed one held.
func TestDeployedAgentServesAServicesVolume(t *testing.T) {
	if _, err := exec.LookPath("smbclient"); err != nil {
		clustertest.Unavailable(t, "smbclient is not installed (apt-get install smbclient)")
	}
	s := needSwarm(t)
	image := agentImage(t)
	dir := filepath.Join("/var/tmp", s.name("data"))
	if err := os.Mkdir(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o770) // past the umask

	name := s.name("files")
	spec := s.workloadSpec(name, "pause")
	spec.Mode = replicated(1)
	cs := spec.TaskTemplate.ContainerSpec
	cs.User = filesUID + ":" + filesUID
	cs.Mounts = []swarmapi.Mount{{Type: "bind", Source: dir, Target: "/data"}, {Type: "tmpfs", Target: "/scratch"}}
	id := s.createService(t, spec, 1)
	workload := s.runningTasks(t, id)[0].Status.ContainerStatus.ContainerID
	volSpec := "service/" + name + ":/data"
	t.Cleanup(func() {
		for _, h := range s.helpersOf(t, volSpec) {
			s.c.RemoveService(context.Background(), h.ID)
		}
	})

	addr, hostKey := s.deployAgent(t, image)
	sess := connectRun(t, addr, hostKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := sess.Volume(ctx, tunnel.VolumeRequest{Kind: tunnel.WorkloadService, Name: name, Volume: "/data"})
	if err != nil {
		t.Fatalf("the volume: %v", err)
	}
	if want := "as uid " + filesUID + " gid " + filesUID + " (read in its container"; !strings.Contains(v.Detail, want) {
		t.Errorf("the volume's detail %q does not say %q", v.Detail, want)
	}
	helpers := s.helpersOf(t, volSpec)
	if len(helpers) != 1 {
		t.Fatalf("%d helpers of %s, want 1", len(helpers), volSpec)
	}
	hs := helpers[0].Spec.TaskTemplate
	if got := hs.ContainerSpec.User; got != filesUID+":"+filesUID {
		t.Errorf("the helper runs as %q, want the workload's %s:%s", got, filesUID, filesUID)
	}
	if !slices.Equal(hs.ContainerSpec.CapabilityDrop, []string{"ALL"}) || len(hs.ContainerSpec.CapabilityAdd) > 0 {
		t.Errorf("the helper's capabilities: drop %v add %v, want every one dropped, none added", hs.ContainerSpec.CapabilityDrop, hs.ContainerSpec.CapabilityAdd)
	}
	if hs.Placement == nil || !slices.Contains(hs.Placement.Constraints, "node.id=="+s.node) {
		t.Errorf("the helper is not placed on the workload's node %s: %+v", s.node, hs.Placement)
	}

	// Written through the run, read by the task, as its uid.
	port := shareThrough(t, sess, v)
	local := t.TempDir()
	want := fmt.Sprintf("written on the laptop at %s\n", time.Now())
	os.WriteFile(filepath.Join(local, "up.txt"), []byte(want), 0o644)
	if out, err := smbclient(v, port, local, "put up.txt"); err != nil {
		t.Fatalf("smbclient put: %v\n%s", err, out)
	}
	got, err := exec.Command(s.docker, "exec", workload, "/workload", "cat", "/data/up.txt").CombinedOutput()
	if err != nil || string(got) != want {
		t.Errorf("the task reads %q (%v), want %q", got, err, want)
	}
	st, err := exec.Command(s.docker, "exec", workload, "/workload", "stat", "/data/up.txt").CombinedOutput()
	if f := strings.Fields(string(st)); err != nil || len(f) != 3 || f[0] != filesUID || f[1] != filesUID {
		t.Errorf("the task sees the file owned by %q (%v), want uid and gid %s", st, err, filesUID)
	}

	// A tmpfs is refused with the reason, and nothing is made.
	_, err = sess.Volume(ctx, tunnel.VolumeRequest{Kind: tunnel.WorkloadService, Name: name, Volume: "/scratch"})
	if err == nil || !strings.Contains(err.Error(), "a tmpfs mount lives in its task's container's memory") {
		t.Errorf("the tmpfs: %v, want it refused with the reason", err)
	}
	if n := len(s.helpersOf(t, "service/"+name+":/scratch")); n > 0 {
		t.Errorf("the refused tmpfs left %d helpers", n)
	}

	// The run ends: its helper is gone within 5 s.
	ended := time.Now()
	sess.Close()
	s.awaitNoHelpers(t, volSpec, clustertest.Settle, false)
	took := time.Since(ended)
	s.awaitNoHelpers(t, volSpec, clustertest.Settle, true)
	t.Logf("run ended: the helper service was gone and its container stopped %s later, the container removed by the engine %s later",
		took.Round(100*time.Millisecond), time.Since(ended).Round(100*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the helper took %s to stop after the run ended, want at most 5 s", took.Round(100*time.Millisecond))
	}

	// The agent is killed with a run's helper: its next task sweeps it.
	sess = connectRun(t, addr, hostKey)
	if _, err := sess.Volume(ctx, tunnel.VolumeRequest{Kind: tunnel.WorkloadService, Name: name, Volume: "/data"}); err != nil {
		t.Fatalf("the volume again: %v", err)
	}
	agent := s.runningTasks(t, s.name("agent"))[0].Status.ContainerStatus.ContainerID
	if out, err := exec.Command(s.docker, "kill", agent).CombinedOutput(); err != nil {
		t.Fatalf("docker kill of the agent: %v: %s", err, out)
	}
	killed := time.Now()
	s.awaitNoHelpers(t, volSpec, 2*clustertest.Settle, true)
	t.Logf("agent killed: its run's helper was swept %s later", time.Since(killed).Round(100*time.Millisecond))
}
