package tunnel_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// A run that asks for its name with the hello (ClientConfig.Asks) is
// served one round trip after its SSH handshake: the hello and the name go
// with the control channel's open, and the agent answers both without a
// forward request. Asked for after the hello, the name costs a round trip
// more. Measured on a link of 160 ms round trip against an SSH handshake
// alone on it; the caller of the name reaches the local process.
func TestANameAskedWithTheHelloIsServedOneRoundTripAfterTheHandshake(t *testing.T) {
	const oneWay = 80 * time.Millisecond
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	far := tunneltest.NewDelayLine(t, addr, oneWay)
	signer, _ := newKey(t)
	local := echoServer(t, "local:")
	handshake := func() time.Duration {
		began := time.Now()
		c, err := ssh.Dial("tcp", far, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey)})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		c.Close()
		return took
	}
	start := func(name string, ask bool) time.Duration {
		t.Helper()
		began := time.Now()
		s, _ := connect(t, far, hostKey, signer, tunnel.RunInfo{Serves: true}, func(c *tunnel.ClientConfig) {
			if ask {
				c.Asks = []tunnel.Ask{{Name: name, Port: 80, Local: local}}
			}
		})
		if _, err := s.Serve(ctxFor(t, 20*time.Second), name, 80, local); err != nil {
			t.Fatalf("Serve %s: %v", name, err)
		}
		took := time.Since(began)
		expectEcho(t, platformDial(platform, name+":80"), "local:")
		s.Close()
		return took
	}
	// The quickest of three of each, taken in turns: the machine's other
	// work only ever adds.
	shake, asked, after := time.Hour, time.Hour, time.Hour
	for range 3 {
		shake, asked, after = min(shake, handshake()), min(asked, start("asked", true)), min(after, start("after", false))
	}
	rtt := 2 * oneWay
	t.Logf("SSH handshake %v; served %v after it asked with the hello, %v asked after it (round trip %v)", shake, asked-shake, after-shake, rtt)
	if asked-shake > rtt*3/2 {
		t.Errorf("a name asked with the hello is served %v after the handshake, want one round trip (%v)", asked-shake, rtt)
	}
	if after-asked < rtt/2 {
		t.Errorf("a name asked after the hello is served %v later than one asked with it, want a round trip (%v)", after-asked, rtt)
	}
}

// A name asked for with the hello that another run holds is refused as a
// forward request of it is, naming the holder, and the run goes on.
func TestANameAskedWithTheHelloIsRefusedAsARequestIs(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.Hold("web", 80, tunnel.Holder{Run: "other-run", User: "alice", Developer: "SHA256:alice", Agent: "agent-1"})
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	s, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true}, func(c *tunnel.ClientConfig) {
		c.Asks = []tunnel.Ask{{Name: "web", Port: 80, Local: "localhost:1"}, {Name: "api", Port: 80, Local: "localhost:1"}}
	})
	ctx := ctxFor(t, 20*time.Second)
	_, err := s.Serve(ctx, "web", 80, "localhost:1")
	var refused *tunnel.ServeError
	if !errors.As(err, &refused) || refused.Name != "web" || !strings.Contains(err.Error(), "already served by alice (key SHA256:alice) since") {
		t.Fatalf("Serve of a held name asked with the hello: %v", err)
	}
	if _, err := s.Serve(ctx, "api", 80, "localhost:1"); err != nil {
		t.Fatalf("Serve of the other name asked: %v", err)
	}
	if _, err := s.Serve(ctx, "api", 80, "localhost:1"); err == nil || !strings.Contains(err.Error(), "served by this run already") {
		t.Errorf("a second Serve of api: %v", err)
	}
	if events.has("hello ignored") {
		t.Errorf("the hello sent again on the channel was not passed over: %s", events)
	}
}

// An older CLI says hello on the control channel, not with its open: the
// agent answers it as before, without HelloAtOpen, and serves what its
// forward requests ask for.
func TestAnOlderCLIsHelloOnTheChannelOpensItsRun(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
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
	hello := `{"type":"hello","run":"run-old","version":"v0.9.0","kind":"serves","os":"linux","arch":"amd64"}`
	ch.Write(binary.BigEndian.AppendUint32(nil, uint32(len(hello))))
	ch.Write([]byte(hello))
	var size [4]byte
	if _, err := ch.Read(size[:]); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	for n := 0; n < len(frame); {
		m, err := ch.Read(frame[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	var welcome map[string]any
	if err := json.Unmarshal(frame, &welcome); err != nil || welcome["type"] != "welcome" {
		t.Fatalf("the answer to the hello: %s (%v)", frame, err)
	}
	if _, said := welcome["helloAtOpen"]; said {
		t.Errorf("the welcome of a hello on the channel says helloAtOpen: %s", frame)
	}
	ok, _, err := c.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"web", 80}))
	if err != nil || !ok {
		t.Fatalf("tcpip-forward of an older CLI: %v %v", ok, err)
	}
	if h, held := platform.Held("web"); !held || h.Holder.Run != "run-old" {
		t.Errorf("web after the older CLI's request: held %v by %+v", held, h)
	}
}

// Open data of the control channel that is not a hello is refused, saying
// so, and changes nothing.
func TestAControlChannelOpenWithoutAHelloIsRefused(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	goodbye := `{"type":"goodbye"}`
	badServe := `{"type":"hello","run":"run-x","version":"v1","kind":"serves","os":"linux","arch":"amd64","serves":[{"name":"Web","port":80}]}`
	for _, data := range []string{
		"garbage",
		string(binary.BigEndian.AppendUint32(nil, uint32(len(goodbye)))) + goodbye,
		string(binary.BigEndian.AppendUint32(nil, uint32(len(badServe)))) + badServe,
	} {
		_, _, err := c.OpenChannel("control@plug", []byte(data))
		var refused *ssh.OpenChannelError
		if !errors.As(err, &refused) || refused.Reason != ssh.Prohibited {
			t.Errorf("open with %q: %v, want it refused", data, err)
		}
	}
	if calls := platform.Calls(); len(calls) != 0 {
		t.Errorf("the platform was asked: %v", calls)
	}
}

// A run that serves more names than one hello asks for asks for them one
// by one, as before.
func TestMoreNamesThanAHelloTakesAreAskedOneByOne(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	var asks []tunnel.Ask
	for i := range 65 {
		asks = append(asks, tunnel.Ask{Name: "web" + itoa(i), Port: 80, Local: "localhost:1"})
	}
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true}, func(c *tunnel.ClientConfig) { c.Asks = asks })
	for _, a := range asks[:2] {
		if _, err := s.Serve(ctxFor(t, 20*time.Second), a.Name, a.Port, a.Local); err != nil {
			t.Fatalf("Serve %s: %v", a.Name, err)
		}
	}
	if platform.Count("serve", "web0") != 1 || platform.Count("serve", "web2") != 0 {
		t.Errorf("the platform's serves: %v, want web0 and web1 only", platform.Calls())
	}
}
