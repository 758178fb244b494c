package tunnel_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// offered reads what an SSH server at addr offers in its KEXINIT: key
// exchanges, host keys, ciphers and MACs (client to server; the server
// offers the same both ways), without logging in.
func offered(t *testing.T, addr string) (kex, hostKeys, ciphers, macs []string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "SSH-2.0-offered_test\r\n")
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the server's version: %v", err)
		}
		if strings.HasPrefix(line, "SSH-") {
			break
		}
	}
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		t.Fatal(err)
	}
	packet := make([]byte, binary.BigEndian.Uint32(head[:4])-1)
	if _, err := io.ReadFull(r, packet); err != nil {
		t.Fatal(err)
	}
	payload := packet[:len(packet)-int(head[4])]
	if payload[0] != 20 { // SSH_MSG_KEXINIT
		t.Fatalf("the server's first packet is of type %d, not KEXINIT", payload[0])
	}
	rest := payload[17:] // type and cookie
	var lists [][]string
	for range 4 {
		n := binary.BigEndian.Uint32(rest)
		lists = append(lists, strings.Split(string(rest[4:4+n]), ","))
		rest = rest[4+n:]
		if len(lists) == 3 { // skip ciphers server to client
			n := binary.BigEndian.Uint32(rest)
			rest = rest[4+n:]
		}
	}
	return lists[0], lists[1], lists[2], lists[3]
}

// The agent offers only algorithms a security audit passes: none of the
// NIST-curve or SHA-1 key exchanges, no CTR or CBC cipher, no MAC that is
// not encrypt-then-MAC; OpenSSH and plug still connect (the tests of
// openssh_test.go and client_test.go).
func TestTheAgentOffersOnlyStrongAlgorithms(t *testing.T) {
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	kex, hostKeys, ciphers, macs := offered(t, addr)
	t.Logf("kex %v\nhost keys %v\nciphers %v\nmacs %v", kex, hostKeys, ciphers, macs)
	for _, k := range kex {
		if !slices.Contains([]string{"mlkem768x25519-sha256", "curve25519-sha256", "curve25519-sha256@libssh.org"}, k) && !strings.HasPrefix(k, "kex-strict-") && k != "ext-info-s" {
			t.Errorf("offers the key exchange %s", k)
		}
	}
	if !slices.Contains(kex, "mlkem768x25519-sha256") || !slices.Contains(kex, "curve25519-sha256") {
		t.Errorf("key exchanges %v lack mlkem768x25519-sha256 or curve25519-sha256", kex)
	}
	if !slices.Equal(hostKeys, []string{"ssh-ed25519"}) {
		t.Errorf("host keys %v", hostKeys)
	}
	for _, c := range ciphers {
		if !strings.HasSuffix(c, "-gcm@openssh.com") && c != "chacha20-poly1305@openssh.com" {
			t.Errorf("offers the cipher %s", c)
		}
	}
	for _, m := range macs {
		if !strings.HasSuffix(m, "-etm@openssh.com") || strings.Contains(m, "sha1") {
			t.Errorf("offers the MAC %s", m)
		}
	}
}

// A client that offers only what the agent no longer does is refused.
func TestTheAgentRefusesWeakAlgorithms(t *testing.T) {
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	signer, _ := newKey(t)
	for _, cfg := range []ssh.Config{
		{KeyExchanges: []string{ssh.KeyExchangeECDHP256, ssh.InsecureKeyExchangeDH14SHA1}},
		{Ciphers: []string{ssh.CipherAES128CTR}, MACs: []string{ssh.HMACSHA256}},
	} {
		c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
			Config: cfg, User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey),
		})
		if err == nil {
			c.Close()
			t.Errorf("a client offering %v connected", cfg)
		}
	}
}

// While 2,000 connections from 40 addresses of one network (127.0.0.0/24)
// stay open and idle (each one the agent closes is opened again at once,
// by a process of its own), a run and an install from another network
// (127.1.0.1) still get in, each without being refused by the agent's 5 s
// handshake queue, all along.
func TestAFloodOfIdleConnectionsFromOneNetworkLocksNobodyOut(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "web says "))
	platform.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}})
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.BinDir = binDir(t, []byte("plug"), "")
		a.Logf = func(string, ...any) {} // the flood's lines go to log only
	}, agentLog(&log))
	if said, _ := startHelper(t, floodProcessEnv+"="+addr); said != "flooding" {
		t.Fatalf("the flood said %q", said)
	}
	flood, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	signer, _ := newKey(t)
	const other = "127.1.0.1" // another /24 than the flood's
	rounds := 0
	for ; flood.Err() == nil; rounds++ {
		start := time.Now()
		if err := dialThroughFrom(other, addr, hostKey, signer, "web:80"); err != nil {
			t.Fatalf("round %d: a run from %s during the flood: %v", rounds, other, err)
		}
		run := time.Since(start)
		// Locked out, the run would wait past the agent's 5 s handshake
		// queue and be refused (the error above). The bound beyond that
		// leaves room for a machine the flood itself keeps busy.
		if run > 15*time.Second {
			t.Errorf("round %d: a run from %s got in after %s", rounds, other, run)
		}
		start = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		out, err := exec.CommandContext(ctx, openSSH(t), append(sshArgs(addr, ""), "-b", other, "get@127.0.0.1", "install")...).Output()
		cancel()
		if err != nil || !strings.Contains(string(out), "plug") {
			t.Fatalf("round %d: an install during the flood (%s): %v\n%s", rounds, time.Since(start), err, out)
		}
		t.Logf("round %d: run in %s, install in %s", rounds, run.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		select {
		case <-flood.Done():
		case <-time.After(2 * time.Second):
		}
	}
	if rounds < 5 {
		t.Errorf("%d rounds in 30 s, want at least 5", rounds)
	}
	if !log.has("refused a connection from 127.0.0.") {
		t.Error("the agent did not log the connections it refused")
	}
	if n := strings.Count(log.String(), "refused a connection from 127.0.0."); n > 100 {
		t.Errorf("the agent logged %d refusals in 30 s: its log is not rate-limited", n)
	}
}

// A key over its cap of runs, names or connections through the agent is
// refused, and told which cap and which setting raises it; other keys are
// not affected.
func TestAKeyOverItsCapsIsRefusedWithTheCapNamed(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "web says "))
	platform.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Limits = tunnel.Limits{RunsPerKey: 2, NamesPerKey: 2, ChannelsPerKey: 3}
	})
	signer, _ := newKey(t)
	ctx := ctxFor(t, 30*time.Second)

	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	connect(t, addr, hostKey, signer, tunnel.RunInfo{})
	_, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey})
	if err == nil || !strings.Contains(err.Error(), "cap of 2 runs open for one key") || !strings.Contains(err.Error(), "PLUG_MAX_RUNS_PER_KEY") {
		t.Errorf("a third run: %v", err)
	}

	local := echoServer(t, "")
	for _, name := range []string{"one", "two"} {
		if _, err := s.Serve(ctx, name, 80, local); err != nil {
			t.Fatalf("serving %s: %v", name, err)
		}
	}
	_, err = s.Serve(ctx, "three", 80, local)
	if err == nil || !strings.Contains(err.Error(), "cap of 2 names served for one key") || !strings.Contains(err.Error(), "PLUG_MAX_NAMES_PER_KEY") {
		t.Errorf("a third name: %v", err)
	}
	if _, held := platform.Held("three"); held {
		t.Error("the name over the cap was served")
	}

	var open []net.Conn
	for range 3 {
		c, err := s.Dial(ctx, "web:80")
		if err != nil {
			t.Fatalf("dialling web:80: %v", err)
		}
		defer c.Close()
		open = append(open, c)
	}
	_, err = s.Dial(ctx, "web:80")
	if err == nil || !strings.Contains(err.Error(), "cap of 3 connections through the agent for one key") || !strings.Contains(err.Error(), "PLUG_MAX_CHANNELS_PER_KEY") {
		t.Errorf("a fourth connection: %v", err)
	}

	other, _ := newKey(t)
	o, _ := connect(t, addr, hostKey, other, tunnel.RunInfo{Serves: true})
	if _, err := o.Serve(ctx, "three", 80, local); err != nil {
		t.Errorf("another key, within its caps: %v", err)
	}
	c, err := o.Dial(ctx, "web:80")
	if err != nil {
		t.Errorf("another key dialling: %v", err)
	} else {
		c.Close()
	}

	open[0].Close()
	clustertest.Until(t, clustertest.Settle, "a connection once one closed", func() bool {
		c, err := s.Dial(ctx, "web:80")
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// A user name with line breaks, escape sequences and a kilobyte of text
// reaches the agent's log and another developer's terminal escaped, on one
// line.
func TestAHostileUserNameIsEscapedInLogsAndRefusals(t *testing.T) {
	platform := tunneltest.NewPlatform()
	var log lines
	var mu sync.Mutex
	var audited []string
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, agentLog(&log), func(a *tunnel.Agent) {
		a.Audit = func(e tunnel.AuditEvent) {
			mu.Lock()
			defer mu.Unlock()
			audited = append(audited, e.User)
		}
	})
	hostile := "mallory\nplug agent: run x opened by admin\r\x1b[31mred\x1b[0m" + strings.Repeat("A", 1024)
	evil, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, evil, tunnel.RunInfo{Serves: true}, func(c *tunnel.ClientConfig) { c.User = hostile })
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	diagnose(t, addr, tunnel.ClientConfig{User: hostile, Signer: evil, HostKey: hostKey})
	mu.Lock()
	for _, user := range audited {
		if strings.HasPrefix(user, "mallory") && user != tunnel.PeerText(hostile) {
			t.Errorf("the audit trail has the user %q", user)
		}
	}
	mu.Unlock()

	victim, _ := newKey(t)
	v, _ := connect(t, addr, hostKey, victim, tunnel.RunInfo{Serves: true})
	_, err := v.Serve(ctxFor(t, 20*time.Second), "web", 80, "localhost:1")
	if err == nil {
		t.Fatal("the held name was served to another key")
	}
	for where, text := range map[string]string{"the refusal": err.Error(), "the agent's log": log.String()} {
		if !strings.Contains(text, `mallory\nplug agent: run x opened by admin\r\x1b[31mred\x1b[0mAAAA`) {
			t.Errorf("%s does not show the user name escaped:\n%s", where, text)
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "plug agent: run x") || strings.ContainsAny(line, "\r\x1b") {
				t.Errorf("%s holds a line the user name made: %q", where, line)
			}
		}
	}
	if strings.Contains(err.Error(), strings.Repeat("A", 300)) {
		t.Error("the refusal carries the whole kilobyte")
	}
}

// A peer asking the agent's status 20,000 times makes it log a few lines,
// not 20,000.
func TestAPeerCannotFloodTheAgentsLog(t *testing.T) {
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), agentLog(&log))
	signer, _ := newKey(t)
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, reqs, err := c.OpenChannel("control@plug", nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	go io.Copy(io.Discard, ch)
	frame := []byte(`{"type":"status"}`)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(frame)))
	msg = append(msg, frame...)
	for range 20000 {
		if _, err := ch.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Until(t, clustertest.Settle, "a status to be logged", func() bool { return log.has("status asked by dev") })
	if n := strings.Count(log.String(), "status asked by dev"); n > 40 {
		t.Errorf("20,000 status requests made %d log lines", n)
	}
}

// dialingPlatform connects as the real platforms do, with a net.Dialer
// whose Control is the agent's (tunnel.DialControl); hosts maps the
// cluster's names to what they resolve to.
type dialingPlatform struct {
	*tunneltest.Platform
	hosts map[string]string
}

func (p *dialingPlatform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if h, ok := p.hosts[host]; ok {
		host = h
	}
	d := net.Dialer{Control: tunnel.DialControl(ctx)}
	return d.DialContext(ctx, network, net.JoinHostPort(host, port))
}

// A run reaches the cluster's names on their ports and nothing else by
// default: an address, a name's other port, a name that resolves to
// loopback (DNS rebinding) or to the cloud's metadata address are refused,
// each naming its rule. PLUG_DIAL widens it; a range does not unlock the
// loopback, only the address listed alone does.
func TestTheDialPolicyRefusesWhatIsNotAClusterName(t *testing.T) {
	local := echoServer(t, "local says ")
	_, localPort, _ := net.SplitHostPort(local)
	platform := &dialingPlatform{Platform: tunneltest.NewPlatform(), hosts: map[string]string{"rebind": "127.0.0.1", "rebind.shop": "127.0.0.1", "meta": "169.254.169.254"}}
	platform.SetNames(
		tunnel.ClusterName{Name: "web", Ports: []int{80}},
		tunnel.ClusterName{Name: "rebind", Aliases: []string{"rebind.shop"}},
		tunnel.ClusterName{Name: "meta", Ports: []int{80}},
	)
	cases := []struct {
		dial []string // PLUG_DIAL
		to   string
		rule string // "" when it goes through
	}{
		{nil, local, "cluster names"},
		{nil, "[::1]:" + localPort, "cluster names"},
		{nil, "elsewhere.example:80", "cluster names"},
		{nil, "web:81", "cluster names and their ports"},
		{nil, "rebind:" + localPort, "loopback"},
		{nil, "rebind.shop:" + localPort, "loopback"},
		{nil, "meta:80", "link-local"},
		{[]string{"127.0.0.0/8"}, local, "loopback"},
		{[]string{"10.0.0.0/8"}, local, "loopback"},
		{[]string{"127.0.0.1/32"}, local, ""},
		{[]string{"127.0.0.1"}, "rebind:" + localPort, ""},
	}
	for _, tc := range cases {
		allow, err := tunnel.ParseDial(strings.Join(tc.dial, ","))
		if err != nil {
			t.Fatal(err)
		}
		addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Dial = allow })
		signer, _ := newKey(t)
		s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})
		ctx := ctxFor(t, 10*time.Second)
		clustertest.Until(t, clustertest.Settle, "the catalog", func() bool { c, known, _ := s.Catalog(); return known && len(c.Names) == 3 })
		c, err := s.Dial(ctx, tc.to)
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("PLUG_DIAL=%v, %s: %v", tc.dial, tc.to, err)
		case tc.rule == "":
			if answer, err := roundTrip(c, "ping"); err != nil || answer != "local says ping" {
				t.Errorf("PLUG_DIAL=%v, %s: %q, %v", tc.dial, tc.to, answer, err)
			}
			c.Close()
		case err == nil:
			c.Close()
			t.Errorf("PLUG_DIAL=%v, %s: connected, want the rule %q", tc.dial, tc.to, tc.rule)
		case !strings.Contains(err.Error(), "dial policy refuses") || !strings.Contains(err.Error(), "(rule: "+tc.rule+")"):
			t.Errorf("PLUG_DIAL=%v, %s: %v, want the rule %q", tc.dial, tc.to, err, tc.rule)
		}
	}
}

// Two agent replicas share a platform and its records of runs: a second
// key sending the first run's id can neither squat it (open a run of that
// id) nor re-attach to it on either replica, nor end it with plug end on
// either, even when a record of its own bears that id (a squat that raced
// in); the first run keeps its names, its callers keep reaching it, it is
// told nothing, and it still moves to the other replica.
func TestAnotherKeyCannotTakeARunByItsID(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addrA, hostKeyA, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.ID = "agent-a" })
	addrB, hostKeyB, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.ID = "agent-b" })
	alice, _ := newKey(t)
	aliceFP := ssh.FingerprintSHA256(alice.PublicKey())
	ctx := ctxFor(t, 30*time.Second)
	run := tunnel.RunInfo{ID: "run-of-alice", Serves: true}
	s, aliceEvents := connect(t, addrA, hostKeyA, alice, run, func(c *tunnel.ClientConfig) { c.User = "alice" })
	if _, err := s.Serve(ctx, "web", 80, echoServer(t, "alice says ")); err != nil {
		t.Fatal(err)
	}
	expectEcho(t, platformDial(platform, "web:80"), "alice says ")
	clustertest.Until(t, clustertest.Settle, "alice's run in the records", func() bool {
		recs, _ := platform.Runs(ctx)
		return len(recs) == 1 && len(recs[0].Names) == 1
	})

	mallory, _ := newKey(t)
	malloryFP := ssh.FingerprintSHA256(mallory.PublicKey())
	as := func(addr string, host ssh.PublicKey) tunnel.ClientConfig {
		return tunnel.ClientConfig{Addr: addr, User: "mallory", Signer: mallory, HostKey: host, Run: run}
	}
	for _, c := range []tunnel.ClientConfig{as(addrB, hostKeyB), as(addrA, hostKeyA)} {
		_, err := tunnel.Connect(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "belongs to another key") {
			t.Errorf("another key saying hello with alice's run id to %s: %v, want a refusal", c.Addr, err)
		}
	}
	// A record of mallory's own bearing alice's run id, as if a squat had
	// raced in on a third replica: plug end by mallory ends hers only.
	if err := platform.PutRun(ctx, tunnel.RunRecord{Run: run.ID, Agent: "agent-c", User: "mallory", Key: malloryFP, Since: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []tunnel.ClientConfig{as(addrB, hostKeyB), as(addrA, hostKeyA)} {
		_, err := tunnel.Connect(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "belongs to another key") {
			t.Errorf("another key with a record of alice's run id saying hello to %s: %v, want a refusal", c.Addr, err)
		}
		c.Run = tunnel.RunInfo{}
		ended, err := tunnel.End(ctx, c, run.ID, "mine now")
		if err != nil || ended.Key != malloryFP {
			t.Errorf("mallory's end of %s on %s: %+v %v, want her own record ended", run.ID, c.Addr, ended, err)
		}
	}
	recs, _ := platform.Runs(ctx)
	for _, rec := range recs {
		if rec.Key == aliceFP && rec.Agent != "agent-a" {
			t.Errorf("alice's run has a record on %s", rec.Agent)
		}
	}

	if b, held := platform.Held("web"); !held || b.Holder.Developer != aliceFP || b.Holder.Agent != "agent-a" {
		t.Errorf("web is held by %+v, %t", b.Holder, held)
	}
	if n := platform.Count("release", "web"); n != 0 {
		t.Errorf("web was released %d times", n)
	}
	expectEcho(t, platformDial(platform, "web:80"), "alice says ")
	select {
	case <-s.Done():
		t.Fatalf("alice's run ended: %v", s.Err())
	default:
	}
	if aliceEvents.has("[ended]") || aliceEvents.has("[refused]") || aliceEvents.has("[warning]") {
		t.Errorf("alice was told:\n%s", aliceEvents)
	}
	if _, err := s.Serve(ctx, "api", 81, echoServer(t, "")); err != nil {
		t.Errorf("alice serving another name afterwards: %v", err)
	}
	// Her run still moves to the other replica: it is hers.
	moved, _ := connect(t, addrB, hostKeyB, alice, run, func(c *tunnel.ClientConfig) { c.User = "alice" })
	if _, err := moved.Serve(ctx, "web", 80, echoServer(t, "alice moved says ")); err != nil {
		t.Errorf("alice moving her run and its name to the other replica: %v", err)
	}
}

// runFlood keeps 2,000 idle connections to addr open from 127.0.0.2,
// opening again at once each one that is closed, until stdin closes; it
// says "flooding" once all are open (or were turned away) once.
func runFlood(addr string) {
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	var started, wg sync.WaitGroup
	for i := range 2000 {
		attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%40))}}
		started.Add(1)
		wg.Go(func() {
			first := true
			for ctx.Err() == nil {
				c, err := attacker.DialContext(ctx, "tcp", addr)
				if first {
					started.Done()
					first = false
				}
				if err != nil {
					continue
				}
				stopRead := context.AfterFunc(ctx, func() { c.Close() })
				io.Copy(io.Discard, c) // until the agent closes it
				stopRead()
				c.Close()
			}
		})
	}
	started.Wait()
	fmt.Println("flooding")
	wg.Wait()
}

// callerAt is a platform that sends the callers of served names to the
// agent's address at (tunnel.CallerAddresser).
type callerAt struct {
	*tunneltest.Platform
	at netip.Addr
}

func (p callerAt) CallerAddr() netip.Addr { return p.at }

// A served name's callers are taken on the agent's own address only, not
// on every interface: the platform's (the pod's address on Kubernetes),
// or loopback on the memory platform.
func TestAServedNameListensOnTheAgentsOwnAddressOnly(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	for _, tc := range []struct {
		platform  tunnel.Platform
		on, notOn string
	}{
		{tunneltest.NewPlatform(), "127.0.0.1", "127.0.0.2"},
		{callerAt{tunneltest.NewPlatform(), netip.MustParseAddr("127.0.0.3")}, "127.0.0.3", "127.0.0.1"},
	} {
		held, _ := tc.platform.(*tunneltest.Platform)
		if c, ok := tc.platform.(callerAt); ok {
			held = c.Platform
		}
		addr, hostKey, _ := tunneltest.StartAgent(t, tc.platform)
		dev, _ := newKey(t)
		s, _ := connect(t, addr, hostKey, dev, tunnel.RunInfo{Serves: true})
		if _, err := s.Serve(ctx, "web", 80, echoServer(t, "")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ServeUDP(ctx, "stats", 8125, "127.0.0.1:9"); err != nil {
			t.Fatal(err)
		}
		b, _ := held.Held("web")
		target := strconv.Itoa(b.Target)
		if c, err := net.Dial("tcp", net.JoinHostPort(tc.on, target)); err != nil {
			t.Errorf("web's callers on %s: %v", tc.on, err)
		} else {
			c.Close()
		}
		if c, err := net.Dial("tcp", net.JoinHostPort(tc.notOn, target)); err == nil {
			c.Close()
			t.Errorf("web's port %s answers on %s too, not only on the agent's own address %s", target, tc.notOn, tc.on)
		}
		u, _ := held.Held("stats")
		// A UDP port bound to one address is not bound to the other:
		// binding that one's port succeeds, binding the agent's fails.
		if c, err := net.ListenPacket("udp", net.JoinHostPort(tc.on, strconv.Itoa(u.Target))); err == nil {
			c.Close()
			t.Errorf("stats's UDP port %d is free on %s: the agent does not listen there", u.Target, tc.on)
		}
		if c, err := net.ListenPacket("udp", net.JoinHostPort(tc.notOn, strconv.Itoa(u.Target))); err != nil {
			t.Errorf("stats's UDP port %d is taken on %s too: %v", u.Target, tc.notOn, err)
		} else {
			c.Close()
		}
	}
}

// dialThroughFrom connects to the agent at addr from the local address from, as
// a plain SSH client with signer, and has it dial target in the cluster:
// it sends a line and expects it echoed, within 15 s in all.
func dialThroughFrom(from, addr string, hostKey ssh.PublicKey, signer ssh.Signer, target string) error {
	// The CLI's connect has no timeout of its own; 15 s leaves room for
	// SYNs the kernel dropped while a flood filled the listen backlog.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 15 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(15 * time.Second))
	conn, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey)})
	if err != nil {
		return err
	}
	client := ssh.NewClient(conn, chans, reqs)
	defer client.Close()
	c, err := client.Dial("tcp", target)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = roundTrip(c, "ping")
	return err
}
