//go:build unix

package swarmplatform

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// An agent deployed on the swarm without PLUG_PUBLIC_ADDR tells the
// installer the port its service publishes, on the address of its node, and
// says so: `ssh -p PORT get@127.0.0.1 install | sh` installs plug with a
// profile that works (plug doctor passes with the key made for it).
func TestDeployedAgentInstallsWithoutAPublicAddress(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		clustertest.Unavailable(t, "the OpenSSH client (ssh) is not installed: apt-get install openssh-client")
	}
	addr, _ := s.deployAgent(t, image)
	_, port, _ := net.SplitHostPort(addr)
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}

	install := exec.Command("sh", "-c", `"$0" -p "$1" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null get@127.0.0.1 install | sh`, sshBin, port)
	install.Env = env
	out, err := install.CombinedOutput()
	t.Logf("the installer:\n%s", out)
	if err != nil {
		t.Fatalf("the installer failed: %v", err)
	}
	if want := "using 127.0.0.1:" + port + ", the address the agent found for itself (service " + s.name("agent") + " publishes port " + port + " in host mode, and this agent's node advertises 127.0.0.1 to the swarm)"; !strings.Contains(string(out), want) {
		t.Errorf("the installer does not say %q", want)
	}
	plug := filepath.Join(home, ".local", "bin", "plug")
	for _, args := range [][]string{{"keygen", "-p", "127.0.0.1"}, {"doctor", "-p", "127.0.0.1"}} {
		cmd := exec.Command(plug, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		t.Logf("plug %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("plug %s: %v", strings.Join(args, " "), err)
		}
	}
}
