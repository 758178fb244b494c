package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// grpcEcho answers a call framed as gRPC frames it (content-type
// application/grpc, over HTTP/2; no gRPC library): each message the caller
// sends is answered at once by one message "NAME: MESSAGE", and the call
// ends with the trailer grpc-status 0 when the caller's stream does. A
// unary call is one message each way, a streaming call as many as the
// caller sends.
func grpcEcho(name string, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Trailer", "Grpc-Status")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.EnableFullDuplex()
	status := "0"
	for {
		msg, err := readGRPCMessage(r.Body)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			status = "13"
			break
		}
		w.Write(grpcMessage(name + ": " + string(msg)))
		rc.Flush()
	}
	w.Header().Set("Grpc-Status", status)
}

// grpcMessage frames msg as gRPC does: not compressed, its length, itself.
func grpcMessage(msg string) []byte {
	b := []byte{0}
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// readGRPCMessage reads one framed message, of at most 1 MiB.
func readGRPCMessage(r io.Reader) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > 1<<20 {
		return nil, errors.New("message too big")
	}
	msg := make([]byte, n)
	_, err := io.ReadFull(r, msg)
	return msg, err
}

// notHTTPListener answers, itself, each connection whose first byte
// cannot start an HTTP request (a capital letter): with the line "NAME
// not HTTP", then it closes it. The others Accept returns, for the HTTP
// server. Each connection is looked at in a goroutine of its own, so that
// one that sends nothing (a readiness probe) holds up no other.
type notHTTPListener struct {
	net.Listener
	name  string
	conns chan net.Conn
	errs  chan error
}

func newNotHTTPListener(l net.Listener, name string) *notHTTPListener {
	n := &notHTTPListener{Listener: l, name: strings.TrimSpace(name), conns: make(chan net.Conn), errs: make(chan error, 1)}
	go n.loop()
	return n
}

func (l *notHTTPListener) loop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.errs <- err
			return
		}
		go func() {
			br := bufio.NewReader(c)
			first, err := br.Peek(1)
			if err == nil && first[0] >= 'A' && first[0] <= 'Z' {
				l.conns <- &peekedConn{Conn: c, r: br}
				return
			}
			defer c.Close()
			if err == nil {
				fmt.Fprintf(c, "%s not HTTP\n", l.name)
			}
		}()
	}
}

func (l *notHTTPListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	}
}

// peekedConn is a connection whose first bytes r has buffered.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
