package cli

import (
	"crypto/sha256"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/localnames"
)

// TestCommandReachesNamesByName: every form of a cluster name resolves for
// every kind of client CMD may be, and reaches the workload behind the
// name; the machine's /etc/hosts is untouched.
func TestCommandReachesNamesByName(t *testing.T) {
	if !asUser(t) {
		return
	}
	before := fileSum(t, "/etc/hosts")
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080))
	c.workload(t, "web:18080", "hello from web")
	forms := []string{"web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local"}
	self, _ := os.Executable()
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", clientsScript(t, self, t.TempDir(), 18080, forms...))
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	checkClients(t, stdout, "hello from web", forms...)
	if after := fileSum(t, "/etc/hosts"); after != before {
		t.Fatal("the machine's /etc/hosts changed")
	}
}

// TestCommandHoldsNoCapability: CMD runs as the developer, with no
// capability, in a user namespace that maps only the developer's ids.
func TestCommandHoldsNoCapability(t *testing.T) {
	if !asUser(t) {
		return
	}
	newCluster(t, useHome(t), "shop")
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status; id -u; cat /proc/self/uid_map")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if line := lineWith(stdout, set+":"); !strings.HasSuffix(line, "0000000000000000") {
			t.Errorf("CMD holds capabilities: %q", line)
		}
	}
	uid := strconv.Itoa(os.Getuid())
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 6 || lines[4] != uid || strings.Join(strings.Fields(lines[5]), " ") != uid+" "+uid+" 1" {
		t.Errorf("CMD is not uid %s, or more than it is mapped:\n%s", uid, stdout)
	}
}

// TestRootKeepsItsPowers: run by root, CMD stays in the machine's user
// namespace with root's capabilities; only its mounts are its own.
func TestRootKeepsItsPowers(t *testing.T) {
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "run the tests as root to test what root's runs keep")
	}
	newCluster(t, useHome(t), "shop")
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "readlink /proc/self/ns/user /proc/self/ns/mnt; grep CapEff /proc/self/status")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	userNS, _ := os.Readlink("/proc/self/ns/user")
	mountNS, _ := os.Readlink("/proc/self/ns/mnt")
	status, _ := os.ReadFile("/proc/self/status")
	if !strings.Contains(stdout, userNS) || strings.Contains(stdout, mountNS) || !strings.Contains(stdout, lineWith(string(status), "CapEff:")) {
		t.Fatalf("CMD's namespaces and capabilities:\n%s\nplug's: %s %s %s", stdout, userNS, mountNS, lineWith(string(status), "CapEff:"))
	}
}

// TestNamesFollowTheCatalog: a name the cluster gains during the run
// resolves and answers within 2 s; one it loses stops resolving.
func TestNamesFollowTheCatalog(t *testing.T) {
	if !asUser(t) {
		return
	}
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080))
	c.workload(t, "api:18081", "hello from api")
	dir := t.TempDir()
	script := `touch started
until curl -sS --max-time 5 http://api:18081/ > answer 2>/dev/null; do sleep 0.02; done; touch reached
while getent hosts api.shop.svc.cluster.local > /dev/null; do sleep 0.02; done; touch gone`
	done := make(chan string, 1)
	go func() {
		_, _, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "cd "+dir+" && "+script)
		done <- stderr
	}()
	waitFile(t, filepath.Join(dir, "started"), clustertest.Settle)
	added := time.Now()
	c.platform.SetNames(k8sName("web", "shop", 18080), k8sName("api", "shop", 18081))
	waitFile(t, filepath.Join(dir, "reached"), clustertest.Settle)
	t.Logf("a new Service answered by name after %s", time.Since(added))
	removed := time.Now()
	c.platform.SetNames(k8sName("web", "shop", 18080))
	waitFile(t, filepath.Join(dir, "gone"), clustertest.Settle)
	t.Logf("a deleted Service stopped resolving after %s", time.Since(removed))
	stderr := <-done
	for _, want := range []string{"new in the cluster: api", "gone from the cluster: api"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("plug did not say %q:\n%s", want, stderr)
		}
	}
}

// TestNoEndpointsRefusedAtOnce: a name nothing answers behind (a Service
// without ready endpoints) fails CMD's connection at once, not after a
// timeout, and plug says why.
func TestNoEndpointsRefusedAtOnce(t *testing.T) {
	if !asUser(t) {
		return
	}
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("idle", "shop", 18082))
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", `curl -sS --max-time 10 -o /dev/null -w 'took %{time_total}\n' http://idle:18082/; echo curl exit $?`)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	took, err := strconv.ParseFloat(strings.TrimPrefix(lineWith(stdout, "took "), "took "), 64)
	// README: such a connection is "refused at once ... within
	// milliseconds, not after a timeout"; the fake cluster refuses at once,
	// so a second is all plug's.
	if code != 0 || err != nil || took >= 1 || strings.Contains(stdout, "curl exit 0") {
		t.Fatalf("plug did not refuse the connection at once (took %v s, %v)", took, err)
	}
	if !strings.Contains(stderr, "a connection to idle:18082 was refused") {
		t.Fatalf("plug did not say why:\n%s", stderr)
	}
}

// TestBadNamesAndPortsLeaveTheRestWorking: a port taken on this machine, a
// name that is no host name, a name with hundreds of ports and, without
// plug setup, a port below 1024: each is told clearly, and the other names
// and ports answer.
func TestBadNamesAndPortsLeaveTheRestWorking(t *testing.T) {
	if !asUser(t) {
		return
	}
	taken, err := net.Listen("tcp", "0.0.0.0:18090")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c := newCluster(t, useHome(t), "shop")
	var many []int
	for p := 21000; p < 21300; p++ {
		many = append(many, p)
	}
	c.platform.SetNames(
		k8sName("web", "shop", 80, 18090, 18091),
		tunnel.ClusterName{Name: "bad name", Ports: []int{18092}},
		k8sName("big", "shop", many...),
	)
	c.workload(t, "web:18091", "hello from web")
	c.workload(t, "big:21299", "hello from big")
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "sh", "-c", "curl -sS --max-time 5 http://web:18091/ http://big:21299/")
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "hello from web") || !strings.Contains(stdout, "hello from big") {
		t.Fatalf("the good names did not answer (exit %d)", code)
	}
	wants := []string{
		"web:18090 does not reach the cluster: port 18090 is taken on this machine by a program listening on all addresses",
		`"bad name" is not a valid host name`,
	}
	if lowPortsNeedSetup(t) {
		wants = append(wants, "web:80 does not answer: ports below 1024 need the one-time preparation of this machine, sudo plug setup")
	}
	for _, want := range wants {
		if !strings.Contains(stderr, want) {
			t.Errorf("plug did not say %q", want)
		}
	}
}

// lowPortsNeedSetup reports whether this user may not listen on port 80.
func lowPortsNeedSetup(t *testing.T) bool {
	if os.Geteuid() == 0 {
		return false
	}
	start, err := readValue("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(start)
	return n > 80
}

// TestSeveralProfiles: the names of both clusters resolve; a name both
// have reaches the first profile's, the other's answers as NAME.PROFILE,
// and plug says so.
func TestSeveralProfiles(t *testing.T) {
	store := useHome(t)
	a, b := newCluster(t, store, "a"), newCluster(t, store, "b")
	a.platform.SetNames(k8sName("web", "shop", 18080))
	a.workload(t, "web:18080", "hello from a")
	b.platform.SetNames(k8sName("web", "shop", 18080), k8sName("api", "infra", 18081))
	b.workload(t, "web:18080", "hello from b")
	b.workload(t, "api:18081", "api of b")
	code, stdout, stderr := runPlug(t, "-p", "a", "-p", "b", "-c", "--", "curl", "-sS", "--max-time", "5", "http://web:18080/", "http://web.b:18080/", "http://web.a:18080/", "http://api:18081/")
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	if code != 0 || stdout != "hello from a\nhello from b\nhello from a\napi of b\n" {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr, "web, web.shop, web.shop.svc, web.shop.svc.cluster.local are names in profiles a and b: they reach a's; b's is reached as web.b") {
		t.Fatal("the clash was not told")
	}
}

// TestServingRunConsumes: the process a -s run serves reaches the others
// by name too.
func TestServingRunConsumes(t *testing.T) {
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080))
	c.workload(t, "web:18080", "hello from web")
	code, stdout, stderr := runPlug(t, "-p", "shop", "-s", "mine:8080:3000", "--", "curl", "-sS", "--max-time", "5", "http://web.shop:18080/")
	if code != 0 || stdout != "hello from web\n" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
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

// waitFile waits for path to exist.
func waitFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	clustertest.Until(t, within, filepath.Base(path)+" to appear", func() bool { return pathExists(path) })
}

// TestNamesHelperByHandChangesNoMount: the names helper started by hand as
// root, outside the namespace plug makes for it, mounts nothing in the
// machine's mount namespace: /etc/hosts, /etc/resolv.conf and the
// propagation of / are as they were.
func TestNamesHelperByHandChangesNoMount(t *testing.T) {
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "the names helper test needs root, to start the helper with the right to mount (sudo go test ./tunnel/cli/)")
	}
	before := mountsOf(t, "/", "/etc/hosts", "/etc/resolv.conf")
	self, _ := os.Executable()
	out, err := exec.Command(self, localnames.HelperArg, "probe").CombinedOutput()
	t.Logf("helper: %v: %s", err, out)
	if after := mountsOf(t, "/", "/etc/hosts", "/etc/resolv.conf"); after != before {
		exec.Command("umount", "/etc/hosts").Run()
		exec.Command("umount", "/etc/resolv.conf").Run()
		t.Fatalf("the names helper changed the machine's mounts:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// mountsOf returns the lines of this process's mount table whose mount
// point is one of points.
func mountsOf(t *testing.T, points ...string) string {
	t.Helper()
	table, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(table), "\n") {
		if f := strings.Fields(line); len(f) > 4 && slices.Contains(points, f[4]) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
