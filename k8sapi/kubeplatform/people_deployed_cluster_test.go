package kubeplatform

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// twoReplicas runs the manifest's agent as two pods.
func twoReplicas(m string) string {
	const one = "  replicas: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: plug"
	if !strings.Contains(m, one) {
		panic("the manifest no longer runs one replica of plug")
	}
	return strings.Replace(m, one, "  replicas: 2\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: plug", 1)
}

// developer is a workstation with plug's CLI, a profile "kube" for the
// deployed agent and its own key pair.
type developer struct {
	t      *testing.T
	plug   string // the CLI binary
	home   string // PLUG_HOME
	name   string // the account
	signer ssh.Signer
	fp     string
	pubkey string // as plug pubkey prints it
}

func newDeveloper(t *testing.T, plug, addr string, hostKey ssh.PublicKey, name string) *developer {
	t.Helper()
	home := t.TempDir()
	store := keys.Open(home)
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey), User: name, Platform: "kubernetes"}, false); err != nil {
		t.Fatal(err)
	}
	pub, err := store.GenerateKey("kube", name+"@test", false)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := store.Signer("kube")
	if err != nil {
		t.Fatal(err)
	}
	return &developer{t: t, plug: plug, home: home, name: name, signer: signer, fp: keys.Fingerprint(pub),
		pubkey: keys.AuthorizedKey(pub) + " " + name + "@test"}
}

// run runs plug with args to its end and returns its exit code and output.
func (d *developer) run(args ...string) (int, string) {
	d.t.Helper()
	cmd := exec.Command(d.plug, args...)
	cmd.Env = append(os.Environ(), "PLUG_HOME="+d.home, "USER="+d.name)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	d.t.Logf("%s: plug %s: exit %d\n%s", d.name, strings.Join(args, " "), code, out)
	return code, string(out)
}

// start starts plug with args in the background; it is killed when the
// test ends.
func (d *developer) start(args ...string) *running {
	d.t.Helper()
	r := &running{done: make(chan struct{})}
	cmd := exec.Command(d.plug, args...)
	cmd.Env = append(os.Environ(), "PLUG_HOME="+d.home, "USER="+d.name)
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	r.cmd = cmd
	go func() { cmd.Wait(); close(r.done) }()
	d.t.Cleanup(func() { cmd.Process.Kill(); <-r.done })
	return r
}

// running is a plug run in the background.
type running struct {
	cmd  *exec.Cmd
	out  tunneltest.Buffer
	done chan struct{}
}

// ended waits up to timeout for the run to exit, and returns its code.
func (r *running) ended(t *testing.T, timeout time.Duration, what string) int {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s: plug still runs after %s:\n%s", what, timeout, r.out.String())
		return 0
	}
}

// auditOf reads the audit trail of the agent pod: the JSON lines of its
// log.
func auditOf(t *testing.T, k *kube, pod string) []tunnel.AuditEvent {
	t.Helper()
	out := k.Kubectl(t, "logs", pod)
	var events []tunnel.AuditEvent
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e tunnel.AuditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Errorf("an audit line that is not JSON: %q: %v", line, err)
			continue
		}
		events = append(events, e)
	}
	return events
}

// findAudit returns the events matching event and key, in order.
func findAudit(events []tunnel.AuditEvent, event, key string) []tunnel.AuditEvent {
	var out []tunnel.AuditEvent
	for _, e := range events {
		if e.Event == event && (key == "" || e.Key == key) {
			out = append(out, e)
		}
	}
	return out
}

// Acceptance 1 and 3 on the real cluster, with the manifest's agent in
// invite mode and plug's CLI: the operator sets the first member (alice)
// with one command; a stranger (carol) is refused with the command that
// accepts her key, by doctor and by a run; alice accepts her, and bob;
// carol's run takes web over; alice removes carol's key, and carol's
// command stops within 5 s with the reason, web restored; bob's run takes
// web over and adds promo; alice ends it with plug end, from plug who; a
// client run of alice is killed with kill -9. The audit trail of that day
// is asserted field by field.
func TestDeployedAdmissionAndAScriptedDay(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t, clustertest.Restricted())}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	plug := buildPlug(t)
	a := deployAgent(t, k, image, clustertest.ManifestEnv("PLUG_ADMISSION", "invite"))
	pod := a.pod(t)
	alice := newDeveloper(t, plug, a.relay.addr, a.hostKey, "alice")
	bob := newDeveloper(t, plug, a.relay.addr, a.hostKey, "bob")
	carol := newDeveloper(t, plug, a.relay.addr, a.hostKey, "carol")
	local := startLocalProcess(t, "127.0.0.1", "laptop")

	// The first member: the operator's one command.
	out := k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "members", "add", "--user", "alice", alice.pubkey)
	if !strings.Contains(out, `"event":"key.accepted"`) || !strings.Contains(out, `"by":"the operator"`) || !strings.Contains(out, alice.fp) {
		t.Errorf("the operator's first member: %s", out)
	}
	clustertest.Eventually(t, clustertest.Settle, "alice let in", func() error {
		if code, out := alice.run("who", "-p", "kube"); code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})

	// Strangers are refused with the command that accepts them.
	accept := "plug members accept -p PROFILE " + carol.fp
	if code, out := carol.run("doctor", "-p", "kube"); code != 1 || !strings.Contains(out, accept) {
		t.Errorf("a stranger's doctor: exit %d", code)
	}
	if code, out := carol.run("-p", "kube", "-s", "web:80:"+strconv.Itoa(local.port), "--", "true"); code != 3 || !strings.Contains(out, accept) {
		t.Errorf("a stranger's run: exit %d", code)
	}
	bob.run("-p", "kube", "-c", "--", "true")
	clustertest.Eventually(t, clustertest.Settle, "two requests pending", func() error {
		_, out := alice.run("members", "-p", "kube")
		if !strings.Contains(out, "PENDING") || !strings.Contains(out, carol.fp) || !strings.Contains(out, bob.fp) {
			return fmt.Errorf("members: %s", out)
		}
		return nil
	})
	// A bad member command changes nothing.
	if code, out := alice.run("members", "remove", "-p", "kube", carol.fp); code != 1 || !strings.Contains(out, "is not a member") {
		t.Errorf("removing a key that is not a member: exit %d", code)
	}
	for _, d := range []*developer{carol, bob} {
		if code, out := alice.run("members", "accept", "-p", "kube", d.fp); code != 0 || !strings.Contains(out, "accepted "+d.fp+" for "+d.name) {
			t.Fatalf("accepting %s: exit %d", d.name, code)
		}
	}

	// carol's run takes web over; alice removes her key.
	var carolRun *running
	clustertest.Eventually(t, clustertest.Settle, "carol serves web", func() error {
		carolRun = carol.start("-p", "kube", "-s", "web:80:"+strconv.Itoa(local.port), "--", "sleep", "600")
		select {
		case <-carolRun.done:
			return fmt.Errorf("carol's run ended: %s", carolRun.out.String())
		case <-time.After(3 * time.Second):
			return nil
		}
	})
	k.eventuallyAnswered(t, "http://web/", "laptop")
	removed := time.Now()
	if code, _ := alice.run("members", "remove", "-p", "kube", carol.fp, "--reason", "left the team"); code != 0 {
		t.Fatalf("removing carol: exit %d", code)
	}
	if code := carolRun.ended(t, clustertest.Settle, "carol's key removed"); code != 4 {
		t.Errorf("carol's plug exits %d, want 4", code)
	}
	t.Logf("carol's command stopped %s after the removal", time.Since(removed).Round(time.Millisecond))
	if o := carolRun.out.String(); !strings.Contains(o, "removed from the members by alice ("+alice.fp+")") || !strings.Contains(o, "left the team") || !strings.Contains(o, "stopping sleep") {
		t.Errorf("carol's terminal:\n%s", o)
	}
	clustertest.Eventually(t, clustertest.Settle, "web restored after carol's removal", k.namesBack(t, before))
	t.Logf("web restored %s after carol's removal", time.Since(removed).Round(time.Millisecond))

	// bob's run takes web over and adds promo; alice ends it from plug who.
	bobRun := bob.start("-p", "kube", "-s", "web:80:"+strconv.Itoa(local.port), "-s", "promo:80:"+strconv.Itoa(local.port), "--", "sleep", "600")
	k.eventuallyAnswered(t, "http://web/", "laptop")
	var runID string
	clustertest.Eventually(t, clustertest.Settle, "bob's run in plug who", func() error {
		_, out := alice.run("who", "-p", "kube")
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, " bob "+bob.fp+" bob@test ") && strings.Contains(line, "serving") &&
				strings.Contains(line, "promo:80 added, web:80 parked") {
				runID = strings.Fields(line)[0]
				return nil
			}
		}
		return fmt.Errorf("who: %s", out)
	})
	ended := time.Now()
	if code, out := alice.run("end", "-p", "kube", runID[:8], "--reason", "demo time"); code != 0 || !strings.Contains(out, "everything it set aside is back") {
		t.Errorf("plug end: exit %d", code)
	}
	if code := bobRun.ended(t, clustertest.Settle, "bob's run ended"); code != 4 {
		t.Errorf("bob's plug exits %d, want 4", code)
	}
	if o := bobRun.out.String(); !strings.Contains(o, "ended by alice ("+alice.fp+"): demo time") {
		t.Errorf("bob's terminal:\n%s", o)
	}
	clustertest.Eventually(t, clustertest.Settle, "web restored and promo gone after plug end", k.namesBack(t, before, "promo"))
	t.Logf("web restored and promo gone %s after plug end", time.Since(ended).Round(time.Millisecond))

	// A client run of alice, killed with kill -9.
	aliceRun := alice.start("-p", "kube", "-c", "--", "sleep", "600")
	clustertest.Eventually(t, clustertest.Settle, "alice's client run in plug who", func() error {
		_, out := alice.run("who", "-p", "kube")
		if !strings.Contains(out, "client only") {
			return fmt.Errorf("who: %s", out)
		}
		return nil
	})
	aliceRun.cmd.Process.Signal(syscall.SIGKILL)
	clustertest.Eventually(t, clustertest.Settle, "alice's killed run gone", func() error {
		_, out := alice.run("who", "-p", "kube")
		if strings.Contains(out, "client only") {
			return fmt.Errorf("who: %s", out)
		}
		return nil
	})

	// The day's audit trail, field by field.
	var events []tunnel.AuditEvent
	clustertest.Eventually(t, clustertest.Settle, "the day's last audit line", func() error {
		events = auditOf(t, k, pod)
		if len(findAudit(events, tunnel.AuditRunEnded, alice.fp)) == 0 {
			return errors.New("no run.ended of alice yet")
		}
		return nil
	})
	check := func(what string, got []tunnel.AuditEvent, n int, ok func(tunnel.AuditEvent) bool) {
		t.Helper()
		if len(got) != n {
			t.Errorf("%s: %d events, want %d: %+v", what, len(got), n, got)
			return
		}
		for _, e := range got {
			if e.Agent != pod || e.Time.IsZero() || !ok(e) {
				t.Errorf("%s: %+v", what, e)
			}
		}
	}
	by := "alice (" + alice.fp + ")"
	for _, d := range []*developer{carol, bob} {
		check(d.name+" refused", findAudit(events, tunnel.AuditRunRefused, d.fp), 1, func(e tunnel.AuditEvent) bool {
			return e.User == d.name && e.From != "" && strings.Contains(e.Reason, "not a member")
		})
		check(d.name+" requested", findAudit(events, tunnel.AuditKeyRequest, d.fp), 1, func(e tunnel.AuditEvent) bool { return e.User == d.name })
		check(d.name+" accepted", findAudit(events, tunnel.AuditKeyAccepted, d.fp), 1, func(e tunnel.AuditEvent) bool { return e.User == d.name && e.By == by })
	}
	opened := func(d *developer, kind string) func(tunnel.AuditEvent) bool {
		return func(e tunnel.AuditEvent) bool {
			return e.User == d.name && e.Comment == d.name+"@test" && e.Version == tunnel.Version && e.Kind == kind && e.From != "" && e.Run != ""
		}
	}
	check("carol's run opened", findAudit(events, tunnel.AuditRunOpened, carol.fp), 1, opened(carol, tunnel.KindServes))
	check("bob's run opened", findAudit(events, tunnel.AuditRunOpened, bob.fp), 1, opened(bob, tunnel.KindServes))
	// alice's plug who, members and end open no run; her client run does.
	check("alice's run opened", findAudit(events, tunnel.AuditRunOpened, alice.fp), 1, opened(alice, tunnel.KindConsumes))
	served := func(name, mode string) func(tunnel.AuditEvent) bool {
		return func(e tunnel.AuditEvent) bool { return e.Name == name && e.Port == 80 && e.Mode == mode && e.Run != "" }
	}
	check("carol serves web", findAudit(events, tunnel.AuditNameServed, carol.fp), 1, served("web", tunnel.ModeParked))
	check("carol gives web back", findAudit(events, tunnel.AuditNameBack, carol.fp), 1, func(e tunnel.AuditEvent) bool {
		return served("web", tunnel.ModeParked)(e) && e.Seconds != nil && *e.Seconds > 0
	})
	bobServed := findAudit(events, tunnel.AuditNameServed, bob.fp)
	slices.SortFunc(bobServed, func(x, y tunnel.AuditEvent) int { return strings.Compare(x.Name, y.Name) })
	check("bob serves", bobServed, 2, func(e tunnel.AuditEvent) bool {
		return served("promo", tunnel.ModeAdded)(e) || served("web", tunnel.ModeParked)(e)
	})
	check("bob gives back", findAudit(events, tunnel.AuditNameBack, bob.fp), 2, func(e tunnel.AuditEvent) bool { return e.Seconds != nil })
	check("carol's key removed", findAudit(events, tunnel.AuditKeyRemoved, carol.fp), 1, func(e tunnel.AuditEvent) bool {
		return e.User == "carol" && e.By == by && e.Reason == "left the team"
	})
	check("carol's run ended", findAudit(events, tunnel.AuditRunEnded, carol.fp), 1, func(e tunnel.AuditEvent) bool {
		return e.How == tunnel.EndKeyRemoved && e.By == by && strings.Contains(e.Reason, "left the team") &&
			slices.Equal(e.Names, []string{"web:80"}) && e.Seconds != nil
	})
	check("bob's run ended", findAudit(events, tunnel.AuditRunEnded, bob.fp), 1, func(e tunnel.AuditEvent) bool {
		return e.How == tunnel.EndEnded && e.By == by && e.Reason == "demo time" && e.Run == runID &&
			slices.Equal(e.Names, []string{"promo:80", "web:80"}) && e.Seconds != nil
	})
	check("alice's run ended", findAudit(events, tunnel.AuditRunEnded, alice.fp), 1, func(e tunnel.AuditEvent) bool {
		return e.How == tunnel.EndDropped && e.By == "" && len(e.Names) == 0 && e.Seconds != nil
	})
	// "who was serving web": a search of the trail.
	var servingWeb []string
	for _, e := range findAudit(events, tunnel.AuditNameServed, "") {
		if e.Name == "web" {
			servingWeb = append(servingWeb, e.User)
		}
	}
	if !slices.Equal(servingWeb, []string{"carol", "bob"}) {
		t.Errorf("who served web: %v", servingWeb)
	}
}

// Acceptance 2 with the manifest's agent at two replicas: a run with a
// connection on each is one row of plug who asked of either; plug end
// asked of the other ends both connections, and every name is back within
// 5 s.
func TestDeployedTwoReplicasWhoAndEnd(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t)}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	a := deployAgent(t, k, image, clustertest.ManifestEnv("PLUG_ADMISSION", "invite"), twoReplicas)
	ips := strings.Fields(k.Kubectl(t, "get", "pod", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[*].status.podIP}"))
	if len(ips) != 2 {
		t.Fatalf("agent pods at %v, want two", ips)
	}
	admin, dev, mallory := newSigner(t), newSigner(t), newSigner(t)
	for user, s := range map[string]ssh.Signer{"admin": admin, "dev": dev, "mallory": mallory} {
		k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "members", "add", "--user", user, keys.AuthorizedKey(s.PublicKey()))
	}
	cfg := func(i int, user string, s ssh.Signer) tunnel.ClientConfig {
		return tunnel.ClientConfig{Addr: net.JoinHostPort(ips[i], "2222"), User: user, Signer: s, HostKey: a.hostKey}
	}
	var id [16]byte
	rand.Read(id[:])
	run := tunnel.RunInfo{ID: hex.EncodeToString(id[:]), Version: tunnel.Version, Serves: true, Comment: "dev@laptop"}
	var sessions []*tunnel.Session
	for i, name := range []string{"web", "promo"} {
		if i == 1 {
			// Another key (a member's) saying hello with the run's id to
			// the replica that has not seen the run yet is refused, once
			// the run's record is there: the run keeps its id for its
			// own key, which moves on to that replica below.
			clustertest.Eventually(t, clustertest.Settle, "the run's record seen from "+ips[1], func() error {
				runs, _, err := tunnel.Who(bg, cfg(1, "admin", admin))
				if err != nil || len(runs) != 1 {
					return fmt.Errorf("who: %+v %v", runs, err)
				}
				return nil
			})
			for j := range ips {
				squat := cfg(j, "mallory", mallory)
				squat.Run = run
				if s, err := tunnel.Connect(bg, squat); err == nil || !strings.Contains(err.Error(), "belongs to another key") {
					if s != nil {
						s.Close()
					}
					t.Errorf("another key saying hello with the run's id to %s: %v, want a refusal", ips[j], err)
				}
			}
		}
		c := cfg(i, "dev", dev)
		c.Run = run
		var s *tunnel.Session
		clustertest.Eventually(t, clustertest.Settle, "dev let in on "+ips[i], func() (err error) { s, err = tunnel.Connect(bg, c); return err })
		t.Cleanup(func() { s.Close() })
		if _, err := s.Serve(bg, name, 80, net.JoinHostPort(k.NodeIP, fmt.Sprint(k.local.port))); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	for i := range ips {
		clustertest.Eventually(t, clustertest.Settle, "one row from "+ips[i], func() error {
			runs, all, err := tunnel.Who(bg, cfg(i, "admin", admin))
			switch {
			case err != nil:
				return err
			case !all || len(runs) != 1 || len(runs[0].Agents) != 2 || len(runs[0].Names) != 2:
				return fmt.Errorf("who: %+v", runs)
			}
			return nil
		})
	}
	start := time.Now()
	if _, err := tunnel.End(bg, cfg(1, "admin", admin), run.ID, "the replicas are drained"); err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		select {
		case <-s.Done():
		case <-time.After(clustertest.Settle):
			t.Fatal("a connection of the ended run goes on")
		}
		var e *tunnel.EndedError
		if !errors.As(s.Err(), &e) || e.Reason != "the replicas are drained" {
			t.Errorf("the developer reads: %v", s.Err())
		}
	}
	clustertest.Eventually(t, clustertest.Settle, "every name back", k.namesBack(t, before, "promo"))
	t.Logf("ended on both replicas, every name back, %s after plug end", time.Since(start).Round(time.Millisecond))

	// A record never outlives its agent: the Lease of a run is owned by the
	// agent pod holding it, and goes with it.
	c := cfg(0, "dev", dev)
	c.Run = tunnel.RunInfo{Serves: true}
	s, err := tunnel.Connect(bg, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var holder string
	clustertest.Eventually(t, clustertest.Settle, "the new run's Lease, owned by its pod", func() error {
		l, err := k.admin.Leases(k.Namespace).List(bg, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run"})
		if err != nil || len(l.Items) != 1 || len(l.Items[0].Metadata.OwnerReferences) != 1 || l.Items[0].Metadata.OwnerReferences[0].Kind != "Pod" {
			return fmt.Errorf("Leases %+v, %v", l, err)
		}
		holder = l.Items[0].Metadata.OwnerReferences[0].Name
		return nil
	})
	k.Kubectl(t, "delete", "pod", holder, "--grace-period=0", "--force")
	clustertest.Eventually(t, 60*time.Second, "the Lease gone with its pod", func() error {
		l, err := k.admin.Leases(k.Namespace).List(bg, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run"})
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%d Leases, %v", len(l.Items), err)
		}
		return nil
	})
}

// The operator's switches close the tunnel on the real cluster: scaling
// the agent to zero ends a run saying so (not to reconnect), and gives
// web back; with PLUG_TUNNEL=closed applied (a rollout), a run moved to
// the new pod is refused saying the tunnel is closed.
func TestDeployedSwitchesCloseTheTunnel(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t)}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	plug := buildPlug(t)
	a := deployAgent(t, k, image)
	dev := newDeveloper(t, plug, a.relay.addr, a.hostKey, "dev")
	local := startLocalProcess(t, "127.0.0.1", "laptop")
	serveWeb := func() *running {
		t.Helper()
		r := dev.start("-p", "kube", "-s", "web:80:"+strconv.Itoa(local.port), "--", "sleep", "600")
		k.eventuallyAnswered(t, "http://web/", "laptop")
		return r
	}

	r := serveWeb()
	k.Kubectl(t, "scale", "deployment/plug", "--replicas=0")
	if code := r.ended(t, 30*time.Second, "the agent scaled to zero"); code != 4 {
		t.Errorf("plug exits %d, want 4", code)
	}
	if o := r.out.String(); !strings.Contains(o, "the run was ended by the operator: every agent pod is stopping: the agent was scaled to zero") {
		t.Errorf("the developer's terminal:\n%s", o)
	}
	clustertest.Eventually(t, clustertest.Settle, "web restored", k.namesBack(t, before))

	k.Kubectl(t, "scale", "deployment/plug", "--replicas=1")
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	r = serveWeb()
	k.Kubectl(t, "set", "env", "deployment/plug", "PLUG_TUNNEL=closed")
	if code := r.ended(t, 90*time.Second, "the tunnel closed by PLUG_TUNNEL"); code != 4 {
		t.Errorf("plug exits %d, want 4", code)
	}
	if o := r.out.String(); !strings.Contains(o, "the tunnel is closed (PLUG_TUNNEL=closed)") {
		t.Errorf("the developer's terminal:\n%s", o)
	}
	clustertest.Eventually(t, 30*time.Second, "web restored", k.namesBack(t, before))
	if code, out := dev.run("doctor", "-p", "kube"); code != 1 || !strings.Contains(out, "PLUG_TUNNEL=closed") {
		t.Errorf("doctor of the closed agent: exit %d", code)
	}
}
