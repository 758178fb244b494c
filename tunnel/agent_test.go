package tunnel_test

import (
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Garbage on plug's control channel closes the connection, and the agent
// goes on serving others.
func TestGarbageOnTheControlChannelClosesTheConnection(t *testing.T) {
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	signer, _ := newKey(t)
	for _, garbage := range []string{
		"\x00\x00\x00\x05hello",                                // not JSON
		"\xff\xff\xff\xff",                                     // larger than any message
		"\x00\x00\x00\x10{\"type\":\"hello\"}",                 // a hello without a run
		"\x00\x00\x00\x02[]",                                   // not an object
		"\x00\x00\x00\x1c{\"type\":\"hello\",\"run\":\"a b\"}", // a run id with a space
	} {
		c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
			User:            "dev",
			Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback: ssh.FixedHostKey(hostKey),
		})
		if err != nil {
			t.Fatal(err)
		}
		ch, reqs, err := c.OpenChannel("control@plug", nil)
		if err != nil {
			t.Fatal(err)
		}
		go ssh.DiscardRequests(reqs)
		ch.Write([]byte(garbage))
		closed := make(chan struct{})
		go func() { c.Wait(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(clustertest.Settle):
			t.Errorf("the connection stayed open after %q", garbage)
			c.Close()
		}
	}
}

// cancel-tcpip-forward gives a name back at once; the connection goes on.
func TestCancelForwardGivesTheNameBack(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:            "dev",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	web := ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"web", 80})
	if ok, _, err := c.SendRequest("tcpip-forward", true, web); !ok || err != nil {
		t.Fatalf("tcpip-forward web:80: %t, %v", ok, err)
	}
	if _, held := platform.Held("web"); !held {
		t.Fatal("web not served")
	}
	if ok, _, err := c.SendRequest("cancel-tcpip-forward", true, web); !ok || err != nil {
		t.Fatalf("cancel-tcpip-forward web:80: %t, %v", ok, err)
	}
	if _, held := platform.Held("web"); held {
		t.Error("web still served after its cancel")
	}
	if ok, _, _ := c.SendRequest("cancel-tcpip-forward", true, web); ok {
		t.Error("a second cancel succeeded")
	}
}
