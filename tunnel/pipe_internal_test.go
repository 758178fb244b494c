package tunnel

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/crypto/ssh"
)

// recordingChannel is an ssh.Channel that keeps what each Write wrote.
type recordingChannel struct {
	ssh.Channel
	writes [][]byte
}

func (c *recordingChannel) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

// sizes is the length of each write, in order.
func (c *recordingChannel) sizes() []int {
	var n []int
	for _, w := range c.writes {
		n = append(n, len(w))
	}
	return n
}

// To an SSH channel, writeData writes at most channelData bytes at a time,
// in order, and a bulk read fills exactly two such writes; to anything else
// it writes once.
func TestWriteDataPutsAtMostChannelDataInEachPacket(t *testing.T) {
	p := make([]byte, 2*channelData+5)
	rand.Read(p)
	var ch recordingChannel
	if n, err := writeData(&ch, p); n != len(p) || err != nil {
		t.Fatalf("writeData = %d, %v", n, err)
	}
	if want := []int{channelData, channelData, 5}; !slices.Equal(ch.sizes(), want) || !bytes.Equal(bytes.Join(ch.writes, nil), p) {
		t.Errorf("writes of %v bytes; want %v, the bytes in order", ch.sizes(), want)
	}

	ch.writes = nil
	if err := copyStream(&ch, bytes.NewReader(make([]byte, sparseBuffer+2*bulkBuffer))); err != nil {
		t.Fatal(err)
	}
	if want := []int{sparseBuffer, channelData, channelData, channelData, channelData}; !slices.Equal(ch.sizes(), want) {
		t.Errorf("copyStream wrote %v bytes a write; want %v", ch.sizes(), want)
	}

	var other bytes.Buffer
	if n, err := writeData(&other, p); n != len(p) || err != nil || !bytes.Equal(other.Bytes(), p) {
		t.Errorf("writeData to a buffer = %d, %v", n, err)
	}
}

// What channelData is for: the receiving x/crypto/ssh copies each packet
// into a new buffer, a 32 KiB small object when the packet carries
// channelData bytes, a 40 KiB span when it carries the 32 KiB a channel
// allows. Carried over an SSH connection in this process, 32 MiB read in
// bulk buffers and written by writeData allocate at least 6 KiB less per
// 32 KiB than the same bytes read and written 64 KiB at a time, as before.
func TestChannelDataPacketsCostTheReceiverLess(t *testing.T) {
	const total = 32 << 20
	allocated := func(chunk int, write func(ch ssh.Channel, p []byte) error) (per32KiB float64) {
		client, server := sshChannelPair(t)
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, server)
			done <- err
		}()
		p := make([]byte, chunk)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for sent := 0; sent < total; sent += len(p) {
			if err := write(client, p); err != nil {
				t.Fatal(err)
			}
		}
		client.CloseWrite()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / (total / (32 << 10))
	}
	least := func(chunk int, write func(ch ssh.Channel, p []byte) error) float64 { // of 3: what else the process allocates meanwhile only adds
		return min(allocated(chunk, write), allocated(chunk, write), allocated(chunk, write))
	}
	whole := least(64<<10, func(ch ssh.Channel, p []byte) error { _, err := ch.Write(p); return err })
	chunked := least(bulkBuffer, func(ch ssh.Channel, p []byte) error { _, err := writeData(ch, p); return err })
	t.Logf("allocated per 32 KiB carried: %.0f bytes written 64 KiB at a time, %.0f by writeData", whole, chunked)
	if whole-chunked < 6<<10 {
		t.Errorf("writeData's packets cost %.0f bytes per 32 KiB, 64 KiB writes' %.0f: want at least 6 KiB less", chunked, whole)
	}
}

// sshChannelPair is the two ends of a session channel of an SSH connection
// over loopback TCP in this process, with plug's algorithms.
func sshChannelPair(t *testing.T) (client, server ssh.Channel) {
	t.Helper()
	signer := newSigner(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan ssh.Channel, 1)
	go func() {
		raw, err := l.Accept()
		if err != nil {
			served <- nil
			return
		}
		cfg := &ssh.ServerConfig{Config: strongAlgorithms(), NoClientAuth: true}
		cfg.AddHostKey(signer)
		conn, chans, reqs, err := ssh.NewServerConn(raw, cfg)
		if err != nil {
			served <- nil
			return
		}
		t.Cleanup(func() { conn.Close() })
		go ssh.DiscardRequests(reqs)
		nc := <-chans
		ch, chReqs, err := nc.Accept()
		if err != nil {
			served <- nil
			return
		}
		go ssh.DiscardRequests(chReqs)
		served <- ch
	}()
	conn, err := ssh.Dial("tcp", l.Addr().String(), &ssh.ClientConfig{Config: strongAlgorithms(), User: "test", HostKeyCallback: ssh.FixedHostKey(signer.PublicKey())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client, chReqs, err := conn.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(chReqs)
	if server = <-served; server == nil {
		t.Fatal("the server's end of the channel did not open")
	}
	return client, server
}

// newSigner is a fresh Ed25519 key, as a host's or a developer's.
func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}
