package tunneltest

import (
	"net"
	"testing"
	"time"
)

// NewDelayLine listens on 127.0.0.1 and passes every connection to target,
// each byte oneWay later than it came, either way: a link of round trip
// 2×oneWay, without loss, for counting the round trips of an exchange. The
// TCP handshake to it is not delayed. It stops when the test ends.
func NewDelayLine(t testing.TB, target string, oneWay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			go delay(up, c, oneWay)
			go delay(c, up, oneWay)
		}
	}()
	return l.Addr().String()
}

// delay passes what src sends to dst, each read oneWay after it came, and
// closes dst once src has ended and all of it is passed.
func delay(dst, src net.Conn, oneWay time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	line := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for c := range line {
			timer.Reset(time.Until(c.due))
			<-timer.C
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				return
			}
		}
	}()
	defer close(line)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			line <- chunk{time.Now().Add(oneWay), buf[:n]}
		}
		if err != nil {
			return
		}
	}
}
