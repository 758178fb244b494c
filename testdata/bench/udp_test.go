package main

import (
	"net"
	"testing"
	"time"
)

// The echo answers a datagram that asks for an acknowledgment with its
// first 16 bytes, every other one whole, and the one-way measurement
// counts each acknowledged datagram's whole size.
func TestEchoAcknowledgesWhatAsksAndEchoesTheRest(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go echoLoop(pc)
	c, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := takeRuns(c); err != nil {
		t.Fatal(err)
	}

	ask := make([]byte, udpDatagram)
	ask[0], ask[8] = 7, udpAckOnly
	echo := make([]byte, udpDatagram)
	echo[0] = 9
	for _, d := range []struct {
		sent []byte
		want int
	}{{ask, udpAckSize}, {echo, udpDatagram}} {
		if _, err := c.Write(d.sent); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _, err := newRunReader(c).next()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != d.want || got[0] != d.sent[0] {
			t.Errorf("a datagram of %d bytes starting %d, byte 8 %d: answered by %d bytes starting %d; want %d starting %d",
				len(d.sent), d.sent[0], d.sent[8], len(got), got[0], d.want, d.sent[0])
		}
	}

	for _, oneway := range []bool{false, true} {
		r, err := udpThroughput(c, udpDatagram, 300*time.Millisecond, oneway)
		if err != nil {
			t.Fatalf("oneway %v: %v", oneway, err)
		}
		if r.echoed == 0 || r.echoedBytes != r.echoed*udpDatagram {
			t.Errorf("oneway %v: %d answered, counted as %d bytes; want some, each %d bytes", oneway, r.echoed, r.echoedBytes, udpDatagram)
		}
	}
}
