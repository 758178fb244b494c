package tunnel_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// thisPlatform is the os-arch the installer detects on this machine.
var thisPlatform = runtime.GOOS + "-" + runtime.GOARCH

// binDir makes an agent's BinDir holding binary as this machine's plug,
// listed in SHA256SUMS with digest (the binary's own when empty).
func binDir(t *testing.T, binary []byte, digest string) string {
	t.Helper()
	dir := t.TempDir()
	name := "plug-" + thisPlatform
	tunneltest.WriteBinary(t, dir, name, binary)
	if digest == "" {
		sum := sha256.Sum256(binary)
		digest = hex.EncodeToString(sum[:])
	}
	sums := fmt.Sprintf("%s  %s\n%s  plug-windows-arm64.exe\n", digest, name, strings.Repeat("0", 64))
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildPlug builds the plug binary of this module.
func buildPlug(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "plug")
	build := exec.Command("go", "build", "-o", out, "plug")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build plug: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// installer runs `ssh get@AGENT install | sh -s -- ARGS...` as a user whose
// home is home, and returns its output and error.
func installer(t *testing.T, addr, home string, args ...string) (string, error) {
	t.Helper()
	return installerVia(t, addr, home, nil, args...)
}

// installerVia is installer with more options for the ssh that fetches
// the script (-b to make it come from another address).
func installerVia(t *testing.T, addr, home string, sshOptions []string, args ...string) (string, error) {
	t.Helper()
	ssh := append([]string{openSSH(t)}, sshArgs(addr, "")...)
	ssh = append(append(ssh, sshOptions...), "get@127.0.0.1", "install")
	script := strings.Join(quoteAll(ssh), " ") + " | sh -s -- " + strings.Join(quoteAll(args), " ")
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func quoteAll(words []string) []string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return quoted
}

// The installer, piped from the agent into sh, installs a working plug in
// ~/.local/bin and creates the profile named after the host, with the
// agent's host key pinned.
func TestInstallerInstallsPlugAndItsProfile(t *testing.T) {
	plug := buildPlug(t)
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, plug, "")
	})
	_, port, _ := net.SplitHostPort(addr)
	home := t.TempDir()

	out, err := installer(t, addr, home, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("installer: %v\n%s", err, out)
	}
	installed := filepath.Join(home, ".local", "bin", "plug")
	data, err := os.ReadFile(installed)
	if err != nil || !bytes.Equal(data, plug) {
		t.Fatalf("%s is not the agent's plug (%v)\n%s", installed, err, out)
	}
	for _, want := range []string{"not on your PATH", "plug keygen -p 127.0.0.1", "plug pubkey -p 127.0.0.1", "plug setup"} {
		if !strings.Contains(out, want) {
			t.Errorf("the installer does not say %q:\n%s", want, out)
		}
	}

	ls := exec.Command(installed, "ls")
	ls.Env = []string{"HOME=" + home}
	listing, err := ls.CombinedOutput()
	if err != nil || !strings.Contains(string(listing), "127.0.0.1:"+port) {
		t.Errorf("plug ls after the install: %v\n%s", err, listing)
	}
	profile, err := os.ReadFile(filepath.Join(home, ".plug", "profiles", "127.0.0.1"))
	pinned := strings.Fields(string(ssh.MarshalAuthorizedKey(hostKey)))[1]
	if err != nil || !strings.Contains(string(profile), pinned) {
		t.Errorf("the profile does not pin the agent's host key %s: %v\n%s", ssh.FingerprintSHA256(hostKey), err, profile)
	}
}

// With --fingerprint, the installer installs nothing unless the agent's
// host key (which its own connections accept, and the profile pins) has
// that fingerprint, and says why; with the right one it installs.
func TestInstallerChecksTheFingerprint(t *testing.T) {
	plug := buildPlug(t)
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, plug, "")
	})
	_, port, _ := net.SplitHostPort(addr)
	right := ssh.FingerprintSHA256(hostKey)
	other, _ := newKey(t)
	wrong := ssh.FingerprintSHA256(other.PublicKey())
	for _, c := range []struct{ args, want []string }{
		{[]string{"--fingerprint", wrong, "127.0.0.1", port}, []string{"the agent's host key is " + right + ", not the " + wrong + " you gave", "Nothing was installed"}},
		{[]string{"--fingerprint=" + wrong, "127.0.0.1", port}, []string{"not the " + wrong + " you gave"}},
		{[]string{"--fingerprint", "MD5:ab:cd", "127.0.0.1", port}, []string{"is not a fingerprint: give it as SHA256:"}},
		{[]string{"--fingerprint"}, []string{"--fingerprint needs a value"}},
	} {
		home := t.TempDir()
		out, err := installer(t, addr, home, c.args...)
		if err == nil {
			t.Errorf("installer %q succeeded:\n%s", c.args, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("installer %q does not say %q:\n%s", c.args, w, out)
			}
		}
		for _, made := range []string{".local", ".plug"} {
			if _, err := os.Stat(filepath.Join(home, made)); err == nil {
				t.Errorf("installer %q made ~/%s", c.args, made)
			}
		}
	}
	home := t.TempDir()
	out, err := installer(t, addr, home, "--fingerprint", right, "127.0.0.1", port)
	if err != nil || !strings.Contains(out, "the agent's host key is "+right+", as you gave") {
		t.Fatalf("installer with the right fingerprint: %v\n%s", err, out)
	}
	if data, err := os.ReadFile(filepath.Join(home, ".local", "bin", "plug")); err != nil || !bytes.Equal(data, plug) {
		t.Errorf("with the right fingerprint plug is not installed (%v)\n%s", err, out)
	}
	// Without it, the installer shows the fingerprint to compare.
	out, err = installer(t, addr, t.TempDir(), "127.0.0.1", port)
	if err != nil || !strings.Contains(out, "the agent's host key is "+right+". Compare it") {
		t.Errorf("installer without --fingerprint: %v\n%s", err, out)
	}
}

// A download that does not match its SHA-256 is not installed.
func TestInstallerRefusesADamagedDownload(t *testing.T) {
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, []byte("#!/bin/sh\n"), strings.Repeat("ab", 32))
	})
	_, port, _ := net.SplitHostPort(addr)
	home := t.TempDir()
	out, err := installer(t, addr, home, "127.0.0.1", port)
	if err == nil || !strings.Contains(out, "damaged") {
		t.Errorf("installer: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "bin", "plug")); err == nil {
		t.Error("the damaged binary was installed")
	}
}

// Without HOST and PORT, and with no public address configured, the
// installer says how to pass them, and installs nothing.
func TestInstallerAsksForTheAddress(t *testing.T) {
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, []byte("#!/bin/sh\n"), "")
	})
	home := t.TempDir()
	out, err := installer(t, addr, home)
	if err == nil || !strings.Contains(out, "| sh -s -- --fingerprint SHA256:... HOST PORT") {
		t.Errorf("installer: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("the installer wrote into the home directory: %v", entries)
	}
}

// The installer warns when the address it pins reaches the agent from
// another source than the connection that fetched it (as through kubectl
// port-forward, which the agent sees come from 127.0.0.1), and installs
// nothing when that address does not reach the agent at all.
func TestInstallerWarnsWhenThePinnedAddressIsAnotherWayIn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the test fetches the installer from 127.0.0.2, a loopback address on Linux only")
	}
	plug := buildPlug(t)
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, plug, "")
	})
	_, port, _ := net.SplitHostPort(addr)

	home := t.TempDir()
	out, err := installerVia(t, addr, home, []string{"-b", "127.0.0.2"}, "127.0.0.1", port)
	want := "warning: 127.0.0.1:" + port + ", the address the profile pins, reaches the agent from 127.0.0.1, but this installer came over a connection from 127.0.0.2"
	if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "HOST PORT is 127.0.0.1 2222") {
		t.Errorf("installer fetched from 127.0.0.2: %v; want %q and how to install again:\n%s", err, want, out)
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "bin", "plug")); err != nil {
		t.Errorf("the warning stopped the install: %v", err)
	}

	out, err = installer(t, addr, t.TempDir(), "127.0.0.1", port)
	if err != nil || strings.Contains(out, "warning") {
		t.Errorf("installer fetched by the address it pins: %v; want no warning:\n%s", err, out)
	}

	closedPort := fmt.Sprint(freePort(t))
	home = t.TempDir()
	out, err = installer(t, addr, home, "127.0.0.1", closedPort)
	if want := "cannot reach the agent at 127.0.0.1:" + closedPort + ", the address the profile would pin; nothing was installed"; err == nil || !strings.Contains(out, want) {
		t.Errorf("installer given an address where no agent answers: %v; want %q:\n%s", err, want, out)
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "bin", "plug")); err == nil {
		t.Error("plug was installed though the address it pins reaches no agent")
	}
}

// publicPlatform finds the agent's public address itself, as
// swarmplatform does from the port its service publishes: here the
// agent's own listening address.
type publicPlatform struct {
	*tunneltest.Platform
	asked atomic.Int32
}

func (p *publicPlatform) PublicAddr(ctx context.Context, port int) (string, string, error) {
	p.asked.Add(1)
	return fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("the test publishes port %d on loopback", port), nil
}

// Without HOST and PORT the installer uses the address the platform found,
// says so and how to give another, and the profile it makes works; the
// agent logs the address and what it assumes.
func TestInstallerUsesTheAddressThePlatformFinds(t *testing.T) {
	plug := buildPlug(t)
	var log lines
	addr, _, _ := tunneltest.StartAgent(t, &publicPlatform{Platform: tunneltest.NewPlatform()}, agentLog(&log), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, plug, "")
	})
	_, port, _ := net.SplitHostPort(addr)
	home := t.TempDir()
	out, err := installer(t, addr, home)
	if err != nil {
		t.Fatalf("installer: %v\n%s", err, out)
	}
	if want := "using 127.0.0.1:" + port + ", the address the agent found for itself (the test publishes port " + port + " on loopback).\nIf you reach it by another address, pass that: ... get@HOST install | sh -s -- HOST PORT"; !strings.Contains(out, want) {
		t.Errorf("the installer does not say %q:\n%s", want, out)
	}
	ls := exec.Command(filepath.Join(home, ".local", "bin", "plug"), "ls")
	ls.Env = []string{"HOME=" + home}
	if listing, err := ls.CombinedOutput(); err != nil || !strings.Contains(string(listing), "127.0.0.1:"+port) {
		t.Errorf("plug ls after the install: %v\n%s", err, listing)
	}
	if want := "the installer tells developers to reach this agent at 127.0.0.1:" + port + ": the test publishes port " + port + " on loopback; if they reach it by another address, set it as the agent's public address (PLUG_PUBLIC_ADDR)"; !log.has(want) {
		t.Errorf("the agent's log lacks %q:\n%s", want, log.String())
	}
}

// An address the operator gives wins: the platform is not asked.
func TestGivenPublicAddrIsNotLookedUp(t *testing.T) {
	platform := &publicPlatform{Platform: tunneltest.NewPlatform()}
	addr, _, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.BinDir = binDir(t, []byte("#!/bin/sh\n"), "")
		a.PublicAddr = "plug.example:32222"
	})
	out, err := exec.Command(openSSH(t), append(sshArgs(addr, ""), "get@127.0.0.1", "install")...).Output()
	if err != nil || !strings.Contains(string(out), "default_host='plug.example'") || !strings.Contains(string(out), "found_how=''") {
		t.Errorf("the installer: %v\n%s", err, out)
	}
	if n := platform.asked.Load(); n != 0 {
		t.Errorf("the platform was asked %d times for the address the operator gave", n)
	}
}

// The get user downloads a binary and its digest, and the Windows
// installer is a script for bash.
func TestGetServesBinariesAndDigests(t *testing.T) {
	binary := []byte("the plug binary\n")
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, binary, "")
		a.PublicAddr = "plug.example:32222"
	})
	get := func(command ...string) string {
		t.Helper()
		args := append(sshArgs(addr, ""), append([]string{"get@127.0.0.1"}, command...)...)
		out, err := exec.Command(openSSH(t), args...).Output()
		if err != nil {
			t.Fatalf("get %s: %v", command, err)
		}
		return string(out)
	}
	if got := get("download", thisPlatform); got != string(binary) {
		t.Errorf("download: %q", got)
	}
	if z, err := gzip.NewReader(strings.NewReader(get("download-gz", thisPlatform))); err != nil {
		t.Errorf("download-gz is not gzip: %v", err)
	} else if got, err := io.ReadAll(z); err != nil || string(got) != string(binary) {
		t.Errorf("download-gz holds %q (%v)", got, err)
	}
	sum := sha256.Sum256(binary)
	if got := get("sha256", thisPlatform); got != hex.EncodeToString(sum[:])+"\n" {
		t.Errorf("sha256: %q", got)
	}
	windows := get("install-windows")
	if !strings.Contains(windows, "install-windows | bash -s -- HOST PORT") || !strings.Contains(windows, "default_host='plug.example'") {
		t.Errorf("the Windows installer is not the bash one for this agent:\n%s", windows)
	}
}

// The get user is refused everything but the installers and the downloads.
func TestGetRefusesEverythingElse(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, ""))
	addr, _, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.BinDir = binDir(t, []byte("plug"), "")
	})
	for _, command := range [][]string{
		{},                                     // a shell
		{"cat", "/etc/passwd"},                 // another command
		{"download", "../../../../etc/passwd"}, // a path
		{"download", "plan9-amd64"},            // an unknown platform
		{"install", "--now"},                   // extra words
		{"-s", "sftp"},                         // a subsystem
	} {
		args := append(sshArgs(addr, ""), "-T", "get@127.0.0.1")
		out, err := exec.Command(openSSH(t), append(args, command...)...).CombinedOutput()
		if err == nil {
			t.Errorf("get %q succeeded:\n%s", command, out)
		}
		if len(command) > 0 && command[0] != "-s" && !strings.Contains(string(out), "the get user runs one of") {
			t.Errorf("get %q does not say what get offers:\n%s", command, out)
		}
	}

	// Forwarding, either way.
	remote := append(sshArgs(addr, ""), "-o", "ExitOnForwardFailure=yes", "-N", "-R", "web:80:127.0.0.1:9", "get@127.0.0.1")
	if out, err := exec.Command(openSSH(t), remote...).CombinedOutput(); err == nil {
		t.Errorf("get -R succeeded:\n%s", out)
	}
	if calls := platform.Calls(); len(calls) != 0 {
		t.Errorf("the get user reached the platform: %v", calls)
	}
	local := freePort(t)
	startSSH(t, append(sshArgs(addr, ""), "-N", "-L", fmt.Sprintf("%d:web:80", local), "get@127.0.0.1")...)
	clustertest.Until(t, clustertest.Settle, "ssh -L to listen", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local))
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if answer, err := roundTrip(c, "ping"); err == nil {
		t.Errorf("get -L reached web: %q", answer)
	}
}

// Idle get connections hold no download slot: with five of them open, a
// sixth installs.
func TestIdleGetConnectionsDoNotBlockInstalls(t *testing.T) {
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, []byte("plug"), "")
	})
	for range 5 {
		c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "get", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for _, cmd := range []string{"install", "download " + thisPlatform} {
		start := time.Now()
		args := append(sshArgs(addr, ""), "get@127.0.0.1", cmd)
		out, err := exec.Command(openSSH(t), args...).Output()
		if err != nil || len(out) == 0 {
			t.Errorf("%s beside five idle get connections: %v\n%s", cmd, err, out)
		}
		if d := time.Since(start); d > clustertest.Settle {
			t.Errorf("%s took %s", cmd, d)
		}
	}
}

// stalledDownload starts a download from the local address from that
// nothing reads, and returns its connection and what the agent says on
// the session's stderr and, once it ends, its exit signal's message.
func stalledDownload(t *testing.T, addr, from string) (*ssh.Client, *lines) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{User: "get", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	c := ssh.NewClient(conn, chans, reqs)
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StdoutPipe(); err != nil { // never read
		t.Fatal(err)
	}
	var stderr lines
	s.Stderr = &stderr
	if err := s.Start("download " + thisPlatform); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err, ok := s.Wait().(*ssh.ExitError); ok {
			stderr.Write([]byte(err.Msg()))
		}
	}()
	return c, &stderr
}

// getFrom runs `ssh get@AGENT download` from the local address from, at
// OpenSSH's default log level as users run it, and returns what it wrote
// on stdout and on stderr.
func getFrom(t *testing.T, addr, from string) (stdout []byte, stderr string, err error) {
	args := append(append([]string{"-o", "LogLevel=INFO", "-b", from}, sshArgs(addr, "")...), "get@127.0.0.1", "download", thisPlatform)
	cmd := exec.Command(openSSH(t), args...)
	var e bytes.Buffer
	cmd.Stderr = &e
	stdout, err = cmd.Output()
	return stdout, e.String(), err
}

// An agent serves at most four downloads at once; the next one is told to
// come back later, and is served once a download ends.
func TestDownloadsAreBounded(t *testing.T) {
	// Larger than an SSH channel's window: a download nobody reads stalls.
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, bytes.Repeat([]byte("plug"), 2<<20), "")
	})
	var stalled []*ssh.Client
	for _, from := range []string{"127.2.0.1", "127.3.0.1", "127.4.0.1", "127.5.0.1"} { // four networks
		c, _ := stalledDownload(t, addr, from)
		stalled = append(stalled, c)
	}
	clustertest.Until(t, clustertest.Settle, "a fifth download to be refused", func() bool {
		_, said, err := getFrom(t, addr, "127.0.0.1")
		return err != nil && strings.Contains(said, "serving 4 downloads already")
	})
	stalled[0].Close()
	clustertest.Until(t, clustertest.Settle, "a download once one ended", func() bool {
		out, _, err := getFrom(t, addr, "127.0.0.1")
		return err == nil && len(out) == 8<<20
	})
}

// Four downloads that nobody reads, from one network, hold two of the four
// download slots, not all: an installer from another network downloads at
// once. A stalled download is cut within two of the 10 s windows whose
// rate it must keep, and is told why.
func TestSlowDownloadsDoNotBlockAnInstaller(t *testing.T) {
	addr, _, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.BinDir = binDir(t, bytes.Repeat([]byte("plug"), 2<<20), "")
	})
	start := time.Now()
	var said []*lines
	for i := range 4 {
		_, stderr := stalledDownload(t, addr, fmt.Sprintf("127.0.0.%d", 2+i))
		said = append(said, stderr)
	}
	clustertest.Eventually(t, clustertest.Settle, "the stalled downloads past their network's share to be refused", func() error {
		refused := 0
		for _, l := range said {
			if l.has("serving 2 downloads to your network already") {
				refused++
			}
		}
		if refused != 2 {
			return fmt.Errorf("%d refused", refused)
		}
		return nil
	})
	for try := range 5 {
		begin := time.Now()
		out, said, err := getFrom(t, addr, "127.1.0.1")
		if err != nil || len(out) != 8<<20 {
			t.Fatalf("download %d from another network beside four stalled ones: %v (%d bytes) %s", try, err, len(out), said)
		}
		// Blocked, it would wait for a stalled one to be cut, after at
		// least its first 10 s window: less than that is not blocked.
		d := time.Since(begin)
		if d > 10*time.Second {
			t.Errorf("download %d from another network took %s", try, d)
		}
		t.Logf("download %d from another network, beside four stalled ones: %s", try, d.Round(time.Millisecond))
	}
	clustertest.Eventually(t, 30*time.Second, "the stalled downloads to be cut for their rate", func() error {
		cut := 0
		for _, l := range said {
			if l.has("under the 64 KiB/s the agent asks of a download") {
				cut++
			}
		}
		if cut != 2 {
			return fmt.Errorf("%d of the 2 served were cut", cut)
		}
		return nil
	})
	d := time.Since(start)
	if d > 25*time.Second {
		t.Errorf("the stalled downloads were cut after %s, want within two 10 s windows", d)
	}
	t.Logf("the stalled downloads were cut, told why, after %s", d.Round(time.Second))
}

// A download that is not whole gzip (another file, or cut short) fails,
// saying so, rather than handing on what it unpacked so far as the binary.
func TestDownloadCLIRefusesWhatIsNotWholeGzip(t *testing.T) {
	dir := binDir(t, bytes.Repeat([]byte("plug"), 1<<16), "")
	gz, err := os.ReadFile(filepath.Join(dir, "plug-"+thisPlatform+".gz"))
	if err != nil {
		t.Fatal(err)
	}
	for what, content := range map[string][]byte{"not gzip": []byte("#!/bin/sh\n"), "cut short": gz[:len(gz)/2]} {
		if err := os.WriteFile(filepath.Join(dir, "plug-"+thisPlatform+".gz"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) { a.BinDir = dir })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := tunnel.DownloadCLI(ctx, tunnel.ClientConfig{Addr: addr, HostKey: hostKey}, thisPlatform, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "is not whole gzip") {
			t.Errorf("%s: DownloadCLI: %v, want that it is not whole gzip", what, err)
		}
	}
}
