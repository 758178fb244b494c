package k8sapi

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// wsServerFrame is a frame the fake API server sends: unmasked, as a
// server's are.
func wsServerFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	f := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		f = append(f, byte(n))
	case n <= 0xffff:
		f = append(f, 126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	return append(f, payload...)
}

// readClientFrame reads a frame the client sent, which must be masked.
func readClientFrame(t *testing.T, r *bufio.Reader) (byte, []byte) {
	t.Helper()
	var head [2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		t.Errorf("reading the client's frame: %v", err)
		return 0, nil
	}
	if head[1]&0x80 == 0 {
		t.Errorf("the client sent an unmasked frame")
	}
	n := int(head[1] & 0x7f)
	var mask [4]byte
	io.ReadFull(r, mask[:])
	p := make([]byte, n)
	io.ReadFull(r, p)
	for i := range p {
		p[i] ^= mask[i%4]
	}
	return head[0] & 0x0f, p
}

// execServer is an API server whose exec endpoint runs script: the frames
// it sends once upgraded.
func execServer(t *testing.T, check func(*http.Request), script func(w *bufio.Writer, r *bufio.Reader)) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		check(r)
		if r.Header.Get("Upgrade") != "websocket" || r.Header.Get("Sec-WebSocket-Version") != "13" {
			http.Error(w, "not a websocket upgrade", http.StatusBadRequest)
			return
		}
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + wsGUID))
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n" +
			"Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n")
		script(rw.Writer, rw.Reader)
		rw.Flush()
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Server: srv.URL, Token: func() (string, error) { return "tok", nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExecReadsStdoutAndOutcome(t *testing.T) {
	c := execServer(t, func(r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/shop/pods/web-1/exec" {
			t.Errorf("path %s", r.URL.Path)
		}
		q := r.URL.Query()
		if !reflect.DeepEqual(q["command"], []string{"env", "-0"}) || q.Get("container") != "app" || q.Get("stdout") != "true" || q.Get("stdin") != "" {
			t.Errorf("query %v", q)
		}
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		}
		if !strings.Contains(r.Header.Get("Sec-WebSocket-Protocol"), "v5.channel.k8s.io") {
			t.Errorf("protocols %q", r.Header.Get("Sec-WebSocket-Protocol"))
		}
	}, func(w *bufio.Writer, r *bufio.Reader) {
		w.Write(wsServerFrame(true, wsBinary, []byte{streamStdout})) // the empty first message of a stream
		w.Write(wsServerFrame(false, wsBinary, append([]byte{streamStdout}, "A=1\x00B=two"...)))
		w.Write(wsServerFrame(true, wsPing, []byte("hi")))
		w.Write(wsServerFrame(true, wsContinuation, []byte(" words\x00")))
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamStdout}, strings.Repeat("x", 300)...)))
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamStderr}, "warning"...)))
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamError}, `{"metadata":{},"status":"Success"}`...)))
		w.Flush()
		if op, p := readClientFrame(t, r); op != wsPong || string(p) != "hi" {
			t.Errorf("the client answered the ping with %d %q", op, p)
		}
		w.Write(wsServerFrame(true, wsClose, nil))
	})
	out, err := c.Exec(context.Background(), "shop", "web-1", "app", []string{"env", "-0"}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if want := "A=1\x00B=two words\x00" + strings.Repeat("x", 300); string(out) != want {
		t.Errorf("stdout %q", out)
	}
}

func TestExecFailures(t *testing.T) {
	failed := `{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit status 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}`
	c := execServer(t, func(*http.Request) {}, func(w *bufio.Writer, r *bufio.Reader) {
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamStderr}, "env: bad option"...)))
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamError}, failed...)))
		w.Write(wsServerFrame(true, wsClose, nil))
	})
	_, err := c.Exec(context.Background(), "shop", "web-1", "app", []string{"env", "-0"}, 1<<20)
	var ee *ExecError
	if !errors.As(err, &ee) || ee.ExitCode != 3 || ee.Stderr != "env: bad option" || !strings.Contains(ee.Message, "non-zero exit code") {
		t.Errorf("err = %#v", err)
	}

	big := execServer(t, func(*http.Request) {}, func(w *bufio.Writer, r *bufio.Reader) {
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamStdout}, strings.Repeat("x", 200)...)))
		w.Write(wsServerFrame(true, wsClose, nil))
	})
	if _, err := big.Exec(context.Background(), "shop", "web-1", "app", []string{"env"}, 100); err == nil || !strings.Contains(err.Error(), "100 bytes") {
		t.Errorf("output over the cap: err = %v", err)
	}

	silent := execServer(t, func(*http.Request) {}, func(w *bufio.Writer, r *bufio.Reader) {
		w.Write(wsServerFrame(true, wsBinary, append([]byte{streamStdout}, "A=1"...)))
	})
	if _, err := silent.Exec(context.Background(), "shop", "web-1", "app", []string{"env"}, 100); err == nil || !strings.Contains(err.Error(), "outcome") {
		t.Errorf("closed without an outcome: err = %v", err)
	}

	hang := execServer(t, func(*http.Request) {}, func(w *bufio.Writer, r *bufio.Reader) {
		w.Flush()
		r.ReadByte() // until the client goes
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := hang.Exec(ctx, "shop", "web-1", "app", []string{"env"}, 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a command that never ends: err = %v", err)
	}
}

func TestExecRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"kind":"Status","status":"Failure","message":"pods \"web-1\" is forbidden: User cannot get resource \"pods/exec\"","reason":"Forbidden","code":403}`)
	}))
	defer srv.Close()
	c, _ := New(Config{Server: srv.URL})
	_, err := c.Exec(context.Background(), "shop", "web-1", "app", []string{"env"}, 100)
	if !IsForbidden(err) {
		t.Errorf("err = %v, want Forbidden", err)
	}
}
