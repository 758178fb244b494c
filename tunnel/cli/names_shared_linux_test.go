package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"plug/tunnel/localnames"
)

// TestTwoRunsPublishOneName: where runs share one hosts file (macOS and
// Windows; here a file of the test's), two runs publish web for two
// clusters at once. The first keeps web: its program reaches its own
// cluster. The second's program reaches its own cluster as web.c2, and the
// second run says that web answers with the other run's cluster.
func TestTwoRunsPublishOneName(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	machine := "127.0.0.1 localhost\r\n10.1.2.3 intranet.example\r\n"
	if err := os.WriteFile(hosts, []byte(machine), 0o644); err != nil {
		t.Fatal(err)
	}
	// A run's block is named by its process, and a block of a process that
	// is gone is removed: the second run, in this process too, takes the
	// process id of a child that lives as long as the test.
	stand := exec.Command("sleep", "600")
	if err := stand.Start(); err != nil {
		t.Fatal(err)
	}
	defer stand.Wait()
	defer stand.Process.Kill()
	pids := make(chan int, 2)
	pids <- os.Getpid()
	pids <- stand.Process.Pid
	system := newResolver
	newResolver = func(_, dir string, say func(string)) (localnames.Resolver, error) {
		return localnames.NewHostsFileResolver(hosts, filepath.Join(dir, localnames.BackupName), <-pids, say)
	}
	t.Cleanup(func() { newResolver = system })

	store := useHome(t)
	m, c2 := newCluster(t, store, "m"), newCluster(t, store, "c2")
	m.platform.SetNames(k8sName("web", "shop", 18080))
	m.workload(t, "web:18080", "hello from m")
	c2.platform.SetNames(k8sName("web", "shop", 18080))
	c2.workload(t, "web:18080", "hello from c2")

	// lookup resolves a name as macOS and Windows do: the first line of the
	// hosts file that has it.
	lookup := fmt.Sprintf(`lookup() { awk -v n="$1" '{ sub(/\r$/, "") } !/^[[:space:]]*#/ { for (i = 2; i <= NF; i++) if ($i == n) { print $1; exit } }' '%s'; }; `, hosts)
	ready, release := filepath.Join(dir, "ready"), filepath.Join(dir, "release")
	type result struct {
		code           int
		stdout, stderr string
	}
	first := make(chan result, 1)
	go func() {
		code, stdout, stderr := runPlug(t, "-p", "m", "-c", "--", "sh", "-c", lookup+
			fmt.Sprintf(`touch '%s'; while [ ! -e '%s' ]; do sleep 0.1; done; curl -sS --max-time 5 "http://$(lookup web):18080/"`, ready, release))
		first <- result{code, stdout, stderr}
	}()
	waitFile(t, ready, 30*time.Second)
	code, stdout, stderr := runPlug(t, "-p", "c2", "-c", "--", "sh", "-c", lookup+
		`curl -sS --max-time 5 "http://$(lookup web):18080/" "http://$(lookup web.c2):18080/"`)
	t.Logf("second run: stdout:\n%s\nstderr:\n%s", stdout, stderr)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := <-first
	t.Logf("first run: stdout:\n%s\nstderr:\n%s", a.stdout, a.stderr)
	if a.code != 0 || a.stdout != "hello from m\n" {
		t.Errorf("the first run's program did not reach its own web (exit %d)", a.code)
	}
	if code != 0 || stdout != "hello from m\nhello from c2\n" {
		t.Fatalf("the second run's program: exit %d; want web to reach m's (the first run's) and web.c2 its own", code)
	}
	told := fmt.Sprintf("warning: web, web.shop, web.shop.svc, web.shop.svc.cluster.local: another plug run on this machine (process %d) published the name first, and it answers it, with its own cluster, not c2's; c2's web is reached as web.c2", os.Getpid())
	if strings.Count(stderr, told) != 1 {
		t.Errorf("the second run did not say once which cluster web reaches: want %q", told)
	}
	if strings.Contains(a.stderr, "another plug run") {
		t.Error("the first run was told that another run answers its names")
	}
	for _, out := range []string{a.stderr, stderr} {
		if strings.Count(out, "a host name several runs publish reaches the cluster of the run that published it first") != 1 {
			t.Errorf("a run did not say once which run answers a shared name:\n%s", out)
		}
	}
	if after := readHosts(t, hosts); after != machine {
		t.Fatalf("the hosts file is not the machine's again after both runs:\n%q", after)
	}
}

func readHosts(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// failingResolver cannot make names resolve: its Update fails.
type failingResolver struct{}

func (failingResolver) Shared() bool              { return false }
func (failingResolver) Start(cmd *exec.Cmd) error { return cmd.Start() }
func (failingResolver) Close() error              { return nil }
func (failingResolver) Answer(localnames.LookupFunc) error {
	return errors.New("the names are all published at start")
}
func (failingResolver) Update([]localnames.HostLine) (map[string]int, error) {
	return nil, errors.New("the disk is full")
}

// TestNoNamesReachedWhenTheyDoNotResolve: when the names could not be
// made to resolve, the run says so, and does not say that the command
// reaches them.
func TestNoNamesReachedWhenTheyDoNotResolve(t *testing.T) {
	system := newResolver
	newResolver = func(string, string, func(string)) (localnames.Resolver, error) { return failingResolver{}, nil }
	t.Cleanup(func() { newResolver = system })
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080), k8sName("db", "shop", 15432))
	code, _, stderr := runPlug(t, "-p", "shop", "-c", "--", "true")
	t.Logf("stderr:\n%s", stderr)
	if code != 0 || !strings.Contains(stderr, "warning: the cluster names could not be updated: the disk is full") {
		t.Fatalf("exit %d; the failure was not told", code)
	}
	if strings.Contains(stderr, "the command reaches") {
		t.Fatal("the run said the command reaches names that do not resolve")
	}
}
