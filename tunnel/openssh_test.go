package tunnel_test

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// ssh -L to a cluster name reaches the workload behind it, both ways.
func TestOpenSSHLocalForwardReachesAName(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "web says "))
	platform.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}})
	addr, _, _ := tunneltest.StartAgent(t, platform)
	_, keyFile := newKey(t)

	local := freePort(t)
	args := append(sshArgs(addr, keyFile), "-N", "-L", fmt.Sprintf("%d:web:80", local), "dev@127.0.0.1")
	startSSH(t, args...)
	expectEcho(t, func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(local)) }, "web says ")
}

// ssh -R NAME:PORT:localhost:LOCAL serves the name: the cluster reaches the
// local process, both ways; ending ssh gives the name back at once, since a
// plain OpenSSH run can never re-attach.
func TestOpenSSHRemoteForwardServesAName(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, _, _ := tunneltest.StartAgent(t, platform)
	_, keyFile := newKey(t)
	local := echoServer(t, "laptop says ")
	_, localPort, _ := net.SplitHostPort(local)

	args := append(sshArgs(addr, keyFile), "-N", "-R", "web:80:127.0.0.1:"+localPort, "dev@127.0.0.1")
	cmd, _, _ := startSSH(t, args...)
	clustertest.Until(t, clustertest.Settle, "web to be served", func() bool { _, ok := platform.Held("web"); return ok })
	expectEcho(t, platformDial(platform, "web:80"), "laptop says ")

	cmd.Process.Kill()
	cmd.Wait()
	clustertest.Until(t, clustertest.Settle, "web to be given back", func() bool { _, ok := platform.Held("web"); return !ok })
	if n := platform.Count("release", "web"); n != 1 {
		t.Errorf("web released %d times, want 1", n)
	}
}

// ssh -R without -N gets a session that says what is served and how to end;
// a name held by another run is refused, and the session says by whom.
func TestOpenSSHSessionSaysWhatIsServedAndWhatIsRefused(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.Hold("api", 8080, tunnel.Holder{Run: "other-run", User: "alice", Developer: "SHA256:alice", Agent: "agent-1"})
	addr, _, _ := tunneltest.StartAgent(t, platform)
	_, keyFile := newKey(t)
	_, localPort, _ := net.SplitHostPort(echoServer(t, ""))

	args := append(sshArgs(addr, keyFile), "-T",
		"-R", "web:80:127.0.0.1:"+localPort, "-R", "api:8080:127.0.0.1:"+localPort, "dev@127.0.0.1")
	_, stderr, _ := startSSH(t, args...)
	clustertest.Until(t, clustertest.Settle, "the session's status line", func() bool { return stderr.has("press Ctrl-C to end") })
	clustertest.Until(t, clustertest.Settle, "web:80 to be reported served", func() bool { return stderr.has("web:80 is served in the cluster") })
	clustertest.Until(t, clustertest.Settle, "api to be reported held by alice", func() bool {
		return stderr.has("api is already served by alice (key SHA256:alice) since")
	})
	if stderr.has("other-run") {
		t.Errorf("the session tells the holder's run id:\n%s", stderr)
	}
}

// A name that is not a DNS-1035 label, or no name at all, is refused.
func TestOpenSSHRemoteForwardRefusesBadNames(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, _, _ := tunneltest.StartAgent(t, platform)
	_, keyFile := newKey(t)
	for _, spec := range []string{"Web_1:80:127.0.0.1:9", "80:127.0.0.1:9", "web:0:127.0.0.1:9"} {
		args := append(sshArgs(addr, keyFile), "-o", "ExitOnForwardFailure=yes", "-N", "-R", spec, "dev@127.0.0.1")
		cmd, _, _ := startSSH(t, args...)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("-R %s: ssh succeeded", spec)
			}
		case <-time.After(clustertest.Settle):
			t.Errorf("-R %s: ssh did not exit on the refused forward", spec)
		}
	}
	if calls := platform.Calls(); len(calls) != 0 {
		t.Errorf("the platform was asked: %v", calls)
	}
}

// In a terminal session (ssh -t), Ctrl-C ends the run at once: its names
// are given back before ssh exits.
func TestOpenSSHCtrlCInATerminalGivesNamesBack(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, _, _ := tunneltest.StartAgent(t, platform)
	_, keyFile := newKey(t)
	_, localPort, _ := net.SplitHostPort(echoServer(t, ""))

	args := append(sshArgs(addr, keyFile), "-tt", "-R", "web:80:127.0.0.1:"+localPort, "dev@127.0.0.1")
	cmd, stderr, stdin := startSSH(t, args...)
	clustertest.Until(t, clustertest.Settle, "web to be served", func() bool { _, ok := platform.Held("web"); return ok })
	clustertest.Until(t, clustertest.Settle, "the status line", func() bool { return stderr.has("press Ctrl-C to end") })
	io.WriteString(stdin, "\x03")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ssh after Ctrl-C: %v\n%s", err, stderr)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("ssh did not end on Ctrl-C")
	}
	if _, held := platform.Held("web"); held {
		t.Error("web still served after Ctrl-C")
	}
}

// A developer's session offers no subsystem (sftp) and no agent or X11
// forwarding; the status session still works with them asked for.
func TestOpenSSHSessionRefusesSubsystemsAndForwardedAgents(t *testing.T) {
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	_, keyFile := newKey(t)
	sftp := append(sshArgs(addr, keyFile), "-T", "-s", "dev@127.0.0.1", "sftp")
	if out, err := exec.Command(openSSH(t), sftp...).CombinedOutput(); err == nil {
		t.Errorf("the sftp subsystem was granted:\n%s", out)
	}
	forwarding := append(sshArgs(addr, keyFile), "-T", "-A", "-X", "-o", "SetEnv=FOO=bar", "dev@127.0.0.1")
	_, stderr, _ := startSSH(t, forwarding...)
	clustertest.Until(t, clustertest.Settle, "the status line", func() bool { return stderr.has("press Ctrl-C to end") })
}
