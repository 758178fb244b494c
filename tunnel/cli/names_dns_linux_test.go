package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// The names of a run that answers its command's DNS (root here; a
// developer after plug setup): a name gets its address when the command
// first looks it up.

// TestNamesAnswerAsLookedUp: the command's resolv.conf names the run's
// responder; a name resolves by every form once looked up, and only then
// enters the command's hosts file; a name the cluster gains during the
// run resolves a moment later and answers by name, and stops resolving
// once the cluster loses it; the machine's own names (localhost) resolve
// as before.
func TestNamesAnswerAsLookedUp(t *testing.T) {
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "a run answers DNS on port 53, which needs root or plug setup: run the tests as root")
	}
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080), k8sName("other", "shop", 18082))
	c.workload(t, "api:18081", "hello from api")
	dir := t.TempDir()
	script := `cp /etc/resolv.conf resolv; cp /etc/hosts hosts-before
getent hosts web web.shop web.shop.svc web.shop.svc.cluster.local localhost > forms
cp /etc/hosts hosts-after; touch started
until getent hosts api > /dev/null; do sleep 0.01; done; touch resolved
curl -sS --max-time 5 http://api.shop:18081/ > answer; touch reached
while getent hosts api > /dev/null; do sleep 0.01; done; touch gone`
	done := make(chan string, 1)
	go func() {
		_, _, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "cd "+dir+" && "+script)
		done <- stderr
	}()
	waitFile(t, filepath.Join(dir, "started"), clustertest.Settle)
	added := time.Now()
	c.platform.SetNames(k8sName("web", "shop", 18080), k8sName("other", "shop", 18082), k8sName("api", "shop", 18081))
	waitFile(t, filepath.Join(dir, "resolved"), clustertest.Settle)
	t.Logf("a new Service resolved by name after %s", time.Since(added))
	waitFile(t, filepath.Join(dir, "reached"), clustertest.Settle)
	c.platform.SetNames(k8sName("web", "shop", 18080), k8sName("other", "shop", 18082))
	waitFile(t, filepath.Join(dir, "gone"), clustertest.Settle)
	stderr := <-done
	t.Logf("plug:\n%s", stderr)

	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	if resolv := read("resolv"); !strings.Contains(resolv, "nameserver 127.") || strings.Count(resolv, "nameserver") != 1 {
		t.Errorf("the command's resolv.conf does not name the run's responder alone:\n%s", resolv)
	}
	forms := strings.Split(strings.TrimSpace(read("forms")), "\n")
	if len(forms) != 5 {
		t.Fatalf("getent answered %d of 5 names:\n%s", len(forms), read("forms"))
	}
	web := strings.Fields(forms[0])[0]
	for _, line := range forms[:4] {
		if f := strings.Fields(line); f[0] != web || !strings.HasPrefix(web, "127.") {
			t.Errorf("a form of web resolved as %q; want %s", line, web)
		}
	}
	if f := strings.Fields(forms[4]); f[0] != "127.0.0.1" && f[0] != "::1" {
		t.Errorf("localhost resolved as %q", forms[4])
	}
	if before, after := read("hosts-before"), read("hosts-after"); strings.Contains(before, "web") || !strings.Contains(after, web+"\tweb ") || strings.Contains(after, "other") {
		t.Errorf("the hosts file should gain web alone once it is looked up:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := read("answer"); got != "hello from api\n" {
		t.Errorf("api answered %q", got)
	}
	for _, want := range []string{"new in the cluster: api", "gone from the cluster: api"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("plug did not say %q:\n%s", want, stderr)
		}
	}
}

// held is a platform whose names come only once release is closed: an
// agent slow to tell its catalog (a large namespace's).
type held struct {
	*tunneltest.Platform
	release chan struct{}
}

func (h held) WatchNames(ctx context.Context, update func([]tunnel.ClusterName)) error {
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Platform.WatchNames(ctx, update)
}

// TestLookupBeforeTheCatalogResolves: a run that answers its command's
// DNS starts the command before the agent has told its names, and a name
// the command looks up at once resolves when they come.
func TestLookupBeforeTheCatalogResolves(t *testing.T) {
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "a run answers DNS on port 53, which needs root or plug setup: run the tests as root")
	}
	store := useHome(t)
	p := held{tunneltest.NewPlatform(), make(chan struct{})}
	p.SetNames(k8sName("web", "shop", 18080))
	startAgentFor(t, store, "shop", p)
	dir := t.TempDir()
	done := make(chan string, 1)
	go func() {
		_, _, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "cd "+dir+" && touch started && getent hosts web.shop > answer; touch looked")
		done <- stderr
	}()
	waitFile(t, filepath.Join(dir, "started"), clustertest.Settle)
	if _, err := os.Stat(filepath.Join(dir, "looked")); err == nil {
		t.Fatal("the command's lookup was answered before the agent told its names")
	}
	close(p.release)
	waitFile(t, filepath.Join(dir, "looked"), clustertest.Settle)
	stderr := <-done
	b, _ := os.ReadFile(filepath.Join(dir, "answer"))
	if f := strings.Fields(string(b)); len(f) < 2 || !strings.HasPrefix(f[0], "127.") || !slices.Contains(f[1:], "web.shop") {
		t.Fatalf("web.shop looked up at start resolved as %q\nplug:\n%s", b, stderr)
	}
	if !strings.Contains(stderr, "the command reaches 1 cluster name(s) by name: web") {
		t.Errorf("plug did not say which names the command reaches:\n%s", stderr)
	}
}

// TestCatalogOnlyForACommandThatLooksUp: a run that answers its
// command's DNS asks for the agent's catalog at the command's first
// lookup: a command that looks nothing up is sent nothing of a large
// namespace, and one that looks a name up is sent the catalog and
// resolves the name.
func TestCatalogOnlyForACommandThatLooksUp(t *testing.T) {
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "a run answers DNS on port 53, which needs root or plug setup: run the tests as root")
	}
	store := useHome(t)
	p := tunneltest.NewPlatform()
	var names []tunnel.ClusterName
	for i := range 2000 {
		names = append(names, k8sName(fmt.Sprintf("svc-%04d", i), "shop", 80))
	}
	p.SetNames(names...)
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	proxy := tunneltest.NewProxy(t, addr)
	addProfile(t, store, "shop", proxy.Addr(), hostKey)

	if code, _, stderr := runPlug(t, "-p", "shop", "-c", "--", "true"); code != 0 {
		t.Fatalf("plug -c -- true: exit %d\n%s", code, stderr)
	}
	quiet := proxy.Down()
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "getent", "hosts", "svc-1999.shop")
	looked := proxy.Down() - quiet
	if f := strings.Fields(stdout); code != 0 || len(f) < 2 || !strings.HasPrefix(f[0], "127.") {
		t.Fatalf("getent hosts svc-1999.shop: exit %d, %q\n%s", code, stdout, stderr)
	}
	t.Logf("the agent sent %d bytes to a run whose command looked nothing up, %d to one that looked a name up", quiet, looked)
	if quiet*4 > looked {
		t.Fatalf("a run whose command looked nothing up was sent %d bytes, one that looked a name up %d: want the catalog sent only to the second", quiet, looked)
	}
}

// TestNamesAllAtStartWithoutPort53: a developer's run that cannot bind
// port 53 (net.ipv4.ip_unprivileged_port_start above 53: no plug setup)
// gives every name its address at start, in the command's hosts file,
// and leaves /etc/resolv.conf the machine's; a run that can answers DNS.
func TestNamesAllAtStartWithoutPort53(t *testing.T) {
	if !asUser(t) {
		return
	}
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080), k8sName("other", "shop", 18082))
	c.workload(t, "web:18080", "hello from web")
	machine, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	// Other tests may run plug setup meanwhile: the run is tried until the
	// machine's setting was the same before and after it.
	clustertest.Eventually(t, clustertest.Settle, "a run while the low ports' setting stays put", func() error {
		low := lowPortsStart(t)
		code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "cat /etc/resolv.conf; echo ---; cat /etc/hosts; echo ---; curl -sS --max-time 5 http://web:18080/")
		if lowPortsStart(t) != low {
			return errors.New("net.ipv4.ip_unprivileged_port_start changed during the run")
		}
		t.Logf("ip_unprivileged_port_start %d: exit %d\n%s\n%s", low, code, stdout, stderr)
		parts := strings.Split(stdout, "---\n")
		if code != 0 || len(parts) != 3 || parts[2] != "hello from web\n" {
			t.Fatalf("exit %d; want web to answer by name:\n%s%s", code, stdout, stderr)
		}
		eager := low > 53
		if got := parts[0] == string(machine) && strings.Contains(parts[1], "\tother "); got != eager {
			t.Fatalf("with ip_unprivileged_port_start %d, the run gave every name its address at start: %v; want %v", low, got, eager)
		}
		return nil
	})
}

// lowPortsStart is net.ipv4.ip_unprivileged_port_start.
func lowPortsStart(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDoctorSaysHowNamesResolve: doctor says that a run of root answers
// its command's DNS, and that a developer's run without plug setup gives
// every name its address at start, and why.
func TestDoctorSaysHowNamesResolve(t *testing.T) {
	if !asUser(t) {
		doctorHome(t, tunneltest.NewPlatform())
		_, out, _ := plug(t, "doctor", "-p", "kube")
		expectLines(t, out, "ok   names: a run answers its command's DNS itself, on a loopback address, port 53")
		return
	}
	doctorHome(t, tunneltest.NewPlatform())
	_, out, _ := plug(t, "doctor", "-p", "kube")
	if lowPortsStart(t) > 53 {
		expectLines(t, out, "warn names: a run gives every cluster name its address and listeners at start", "sudo plug setup")
	} else {
		expectLines(t, out, "ok   names: a run answers its command's DNS itself")
	}
}
