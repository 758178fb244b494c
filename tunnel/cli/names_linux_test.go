package cli

import (
	"crypto/sha256"
	"os"
	"strings"
	"testing"

	"plug/tunnel"
)

// TestCommandReachesNamesByName: every form of a cluster name resolves for
// CMD, and a connection to it reaches the workload behind it; the
// machine's /etc/hosts is untouched.
func TestCommandReachesNamesByName(t *testing.T) {
	before := fileSum(t, "/etc/hosts")
	store := useHome(t)
	c := newCluster(t, store, "shop")
	c.platform.SetNames(tunnel.ClusterName{Name: "web", Aliases: []string{"web.shop", "web.shop.svc", "web.shop.svc.cluster.local"}, Ports: []int{18080}})
	c.workload(t, "web:18080", "hello from web")
	script := `for h in web web.shop web.shop.svc web.shop.svc.cluster.local; do curl -sS --max-time 5 http://$h:18080/; done; getent hosts web`
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := strings.Count(stdout, "hello from web"); n != 4 {
		t.Fatalf("%d of the 4 forms reached web\nstdout:\n%s\nstderr:\n%s", n, stdout, stderr)
	}
	if !strings.Contains(stdout, "web.shop.svc.cluster.local") {
		t.Fatalf("getent does not show the name's forms:\n%s", stdout)
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	if after := fileSum(t, "/etc/hosts"); after != before {
		t.Fatal("the machine's /etc/hosts changed")
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
