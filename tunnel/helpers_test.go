package tunnel_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// newKey makes a developer key pair; the private key is also written, in
// OpenSSH form, to a file for ssh -i.
func newKey(t testing.TB) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test key")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return signer, path
}

// openSSH returns the path of the OpenSSH client. Without one the test
// fails under CI and is skipped otherwise.
func openSSH(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("ssh")
	if err != nil {
		clustertest.Unavailable(t, "the OpenSSH client (ssh) is not installed: apt-get install openssh-client")
	}
	return path
}

// sshArgs are the options every OpenSSH invocation of the tests uses: no
// user configuration, no known hosts, no questions. (OpenSSH keeps the first
// value given for an option.)
func sshArgs(addr, keyFile string) []string {
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"-F", "/dev/null", "-p", port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR"}
	if keyFile != "" {
		args = append(args, "-o", "IdentitiesOnly=yes", "-i", keyFile)
	}
	return args
}

// startSSH runs OpenSSH in the background until the test ends; its stderr
// is collected, its stdin open until the test ends.
func startSSH(t *testing.T, args ...string) (*exec.Cmd, *lines, io.Writer) {
	t.Helper()
	cmd := exec.Command(openSSH(t), args...)
	stderr := &lines{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe() // open until the test ends: no EOF to the session
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, stderr, stdin
}

// lines collects text written by a process or an event callback.
type lines struct{ tunneltest.Buffer }

func (l *lines) has(s string) bool { return strings.Contains(l.String(), s) }

// events records a Session's events.
func (l *lines) events(e tunnel.Event) {
	fmt.Fprintf(l, "[%s] %s\n", e.Kind, e.Text)
}

// echoServer answers each line it reads with prefix and the line, until
// the test ends.
func echoServer(t *testing.T, prefix string) string {
	t.Helper()
	return serveEach(t, echo(prefix))
}

// echo answers each line a connection sends with prefix and the line.
func echo(prefix string) func(net.Conn) {
	return func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, prefix+line)
		}
	}
}

// serveEach listens on a loopback port until the test ends, handles each
// connection with handle in its own goroutine and closes it after, and
// returns the port's address.
func serveEach(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	serveOn(tb, l, handle)
	return l.Addr().String()
}

// serveOn is serveEach on a listener of the test's.
func serveOn(tb testing.TB, l net.Listener, handle func(net.Conn)) {
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// roundTrip writes a line on c and returns the answer line.
func roundTrip(c net.Conn, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(answer, "\n"), err
}

// expectEcho checks that dial reaches, within a few seconds, an echo
// server answering with prefix.
func expectEcho(t *testing.T, dial func() (net.Conn, error), prefix string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Settle, "an answer through the tunnel", func() error { return echoOnce(dial, prefix) })
}

func echoOnce(dial func() (net.Conn, error), prefix string) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close()
	got, err := roundTrip(c, "ping")
	if err != nil || got != prefix+"ping" {
		return fmt.Errorf("answer %q, %v", got, err)
	}
	return nil
}

// freePort returns a loopback port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// connect opens a session to an agent, recording its events; it is closed
// when the test ends.
func connect(t testing.TB, addr string, hostKey ssh.PublicKey, signer ssh.Signer, run tunnel.RunInfo, tweak ...func(*tunnel.ClientConfig)) (*tunnel.Session, *lines) {
	t.Helper()
	events := &lines{}
	cfg := tunnel.ClientConfig{
		Addr:    addr,
		User:    "dev",
		Signer:  signer,
		HostKey: hostKey,
		Run:     run,
		Events:  events.events,
		Profile: "test",
	}
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := tunnel.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, events
}

func platformDial(p *tunneltest.Platform, address string) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		return p.DialContext(context.Background(), "tcp", address)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
