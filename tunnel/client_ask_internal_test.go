package tunnel

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// olderAgent is an agent of before the hello at open, as far as a run's
// start goes: it ignores the control channel's open data, answers the
// hello sent on the channel with a welcome that does not say HelloAtOpen,
// and serves a name when a tcpip-forward asks for it (served, then the
// reply). It counts the hellos and forward requests it was sent.
type olderAgent struct {
	addr     string
	hostKey  ssh.PublicKey
	hellos   atomic.Int32
	forwards atomic.Int32
}

func startOlderAgent(t *testing.T) *olderAgent {
	t.Helper()
	signer := newSigner(t)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	a := &olderAgent{addr: l.Addr().String(), hostKey: signer.PublicKey()}
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { raw.Close() })
			go a.serve(raw, cfg)
		}
	}()
	return a
}

func (a *olderAgent) serve(raw net.Conn, cfg *ssh.ServerConfig) {
	conn, chans, reqs, err := ssh.NewServerConn(raw, cfg)
	if err != nil {
		return
	}
	control := make(chan *controlConn, 1)
	go func() {
		for nc := range chans {
			if nc.ChannelType() != controlChannelType {
				nc.Reject(ssh.UnknownChannelType, "no")
				continue
			}
			ch, chReqs, err := nc.Accept()
			if err != nil {
				return
			}
			go ssh.DiscardRequests(chReqs)
			c := &controlConn{rw: ch}
			for {
				typ, _, err := c.receive()
				if err != nil {
					return
				}
				switch {
				case typ == typeHello && a.hellos.Add(1) == 1:
					c.send(welcomeMsg{Version: "v1.0.0", Agent: "older", Names: true, Filters: true, UDPServe: true})
					control <- c
				case typ == typeGoodbye:
					c.send(goodbyeMsg{})
				}
			}
		}
	}()
	for req := range reqs {
		if req.Type != "tcpip-forward" {
			req.Reply(false, nil)
			continue
		}
		a.forwards.Add(1)
		var m forwardRequest
		ssh.Unmarshal(req.Payload, &m)
		c := <-control
		control <- c
		c.send(servedMsg{Name: m.Addr, Port: int(m.Port), Detail: "served by the older agent"})
		req.Reply(true, nil)
	}
	conn.Close()
}

// A run that asks for its names with the hello, of an agent older than
// that, asks for them again with forward requests once the welcome shows
// the agent did not take them, and is served as before; the older agent
// answers the one hello it reads.
func TestNamesAskedOfAnOlderAgentAreAskedAgain(t *testing.T) {
	a := startOlderAgent(t)
	signer := newSigner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	asks := []Ask{{Name: "web", Port: 80, Local: "localhost:1"}, {Name: "api", Port: 8080, Local: "localhost:2"}}
	s, err := Connect(ctx, ClientConfig{Addr: a.addr, User: "dev", Signer: signer, HostKey: a.hostKey, Run: RunInfo{Serves: true}, Asks: asks})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ask := range asks {
		served, err := s.Serve(ctx, ask.Name, ask.Port, ask.Local)
		if err != nil || served.Detail != "served by the older agent" {
			t.Fatalf("Serve %s of an older agent: %+v, %v", ask.Name, served, err)
		}
	}
	if h, f := a.hellos.Load(), a.forwards.Load(); h != 1 || f != 2 {
		t.Errorf("the older agent read %d hello(s) and %d forward request(s), want 1 and 2", h, f)
	}
}
