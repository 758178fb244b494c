package tunneltest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// HTTPClient is an HTTP client whose every connection is one dial makes:
// HTTP/1.1 over one kept-alive connection at a time, or with h2 HTTP/2
// with prior knowledge (h2c) over one connection.
func HTTPClient(dial func(ctx context.Context) (net.Conn, error), h2 bool) *http.Client {
	var protocols http.Protocols
	if h2 {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Protocols:           &protocols,
		MaxConnsPerHost:     1,
		MaxIdleConnsPerHost: 1,
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
	}}
}

// Ask GETs url with c, with the header name: value when value is not
// empty, and returns the body, trimmed; an answer other than 200 is an
// error.
func Ask(c *http.Client, url, name, value string) (string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return "", err
	}
	if value != "" {
		req.Header.Set(name, value)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return strings.TrimSpace(string(body)), err
}

// H2CUpgrade sends GET / on c with the header name: value, asking to
// upgrade the connection to h2c (RFC 7540 section 3.2), and returns the
// body of the answer the HTTP/2 connection then gives on stream 1. It
// speaks just enough HTTP/2 by hand (the standard library's client has no
// h2c upgrade): the preface, an empty SETTINGS, the acknowledgement of the
// server's. It closes c.
func H2CUpgrade(c net.Conn, name, value string) (string, error) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: web\r\n%s: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n", name, value)
	r := bufio.NewReader(c)
	status, _ := r.ReadString('\n')
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		return "", fmt.Errorf("the upgrade was answered %q", status)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if line == "\r\n" {
			break
		}
	}
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	var body []byte
	for {
		head := make([]byte, 9)
		if _, err := io.ReadFull(r, head); err != nil {
			return "", fmt.Errorf("reading a frame: %v (body so far %q)", err, body)
		}
		payload := make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			return "", err
		}
		kind, flags, stream := head[3], head[4], binary.BigEndian.Uint32(head[5:])&0x7fffffff
		switch {
		case kind == 0x4 && flags&0x1 == 0: // SETTINGS: acknowledge
			c.Write([]byte{0, 0, 0, 0x4, 0x1, 0, 0, 0, 0})
		case kind == 0x0 && stream == 1: // DATA
			body = append(body, payload...)
			if flags&0x1 != 0 {
				return string(body), nil
			}
		case kind == 0x1 && stream == 1 && flags&0x1 != 0: // HEADERS ending the stream
			return string(body), nil
		case kind == 0x7: // GOAWAY
			return "", fmt.Errorf("GOAWAY %x", payload)
		}
	}
}

// DevServer is a developer's process on 127.0.0.1, for personal takeover
// tests: it answers HTTP/1.1 and h2c with "WHO PROTO", and gRPC-framed
// calls with "WHO: MESSAGE" for each message. It returns its address and
// stops when t ends.
func DevServer(t testing.TB, who string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/grpc" {
			fmt.Fprintf(w, "%s %s\n", who, r.Proto)
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		rc := http.NewResponseController(w)
		for {
			msg, err := ReadGRPCFrame(r.Body)
			if err != nil {
				break
			}
			w.Write(GRPCFrame(who + ": " + msg))
			rc.Flush()
		}
		w.Header().Set("Grpc-Status", "0")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// GRPCFrame frames msg as gRPC does: not compressed, its length, itself.
func GRPCFrame(msg string) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
}

// ReadGRPCFrame reads one gRPC-framed message.
func ReadGRPCFrame(r io.Reader) (string, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return "", err
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	_, err := io.ReadFull(r, msg)
	return string(msg), err
}

// GRPCCall makes a call of messages to url over c (HTTP/2), with the
// header name: value when value is not empty, sending each message only
// once the previous one is answered, and returns the answers and the
// grpc-status trailer.
func GRPCCall(c *http.Client, url, name, value string, messages ...string) ([]string, string, error) {
	body, send := io.Pipe()
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	if value != "" {
		req.Header.Set(name, value)
	}
	go send.Write(GRPCFrame(messages[0]))
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var answers []string
	for i := range messages {
		msg, err := ReadGRPCFrame(resp.Body)
		if err != nil {
			return answers, "", fmt.Errorf("answer %d: %w", i, err)
		}
		answers = append(answers, msg)
		if i+1 < len(messages) {
			go send.Write(GRPCFrame(messages[i+1]))
		} else {
			send.Close()
		}
	}
	io.Copy(io.Discard, resp.Body)
	return answers, resp.Trailer.Get("Grpc-Status"), nil
}
