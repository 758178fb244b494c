// Package handout is what plug's agent hands out to the SSH user "get",
// who needs no key: the installer, and the CLI binaries it downloads with
// their SHA-256 digests. The image stores the binaries gzipped: download-gz
// hands one out as stored (the installer and plug update ask so), download
// unpacked (plug versions from before download-gz ask so), and sha256 is
// the digest of the unpacked binary.
//
//	ssh -p 2222 get@agent install | sh -s -- HOST PORT
//	ssh -p 2222 get@agent install-windows | bash -s -- HOST PORT
//	ssh -p 2222 get@agent download-gz linux-amd64 | gzip -d >plug
//	ssh -p 2222 get@agent download linux-amd64 >plug
//	ssh -p 2222 get@agent sha256 linux-amd64
//	ssh -p 2222 get@agent from
//
// A get connection may do one thing: run one of these commands in one
// session. Everything else is refused: no shell, no forwarding, no other
// channel, no global request. Downloads served at once, the length of a
// connection, the command's length and the sizes of the files served are
// capped (see the constants).
package handout

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// User is the SSH user name of the handout.
const User = "get"

// The caps of the handout. A get connection must run its command within
// getStartTimeout, and ends after getTimeout whatever it does. Only a
// download in progress takes one of the maxGetSessions slots, at most
// maxGetPerNetwork of them for one source network (Server.Network), and a
// download slower than minGetRate over any getRateWindow (the client
// stopped reading, or reads slowly to hold a slot) is cut, saying so. (The
// agent also bounds get connections per source network, as it does
// handshakes.)
const (
	maxGetSessions   = 4                // downloads served at once by an agent
	maxGetPerNetwork = 2                // of those, from one source network
	getTimeout       = 5 * time.Minute  // a get connection is closed after this
	getStartTimeout  = 10 * time.Second // a get connection that runs no command by then is closed
	minGetRate       = 64 << 10         // bytes a second a download must average over each getRateWindow
	getRateWindow    = 10 * time.Second
	maxGetCommand    = 64        // bytes of an exec command
	maxBinarySize    = 512 << 20 // a served binary, gzipped or not, larger than this is refused
	maxSumsSize      = 64 << 10  // SHA256SUMS larger than this is refused
)

const getUsage = `the get user runs one of:
  install                  the installer for macOS and Linux:  ... get@HOST install | sh -s -- HOST PORT
  install-windows          the installer for Git Bash:         ... get@HOST install-windows | bash -s -- HOST PORT
  download-gz OS-ARCH      the plug binary, gzipped, e.g. download-gz linux-amd64
  download OS-ARCH         the plug binary, e.g. download linux-amd64
  sha256 OS-ARCH           its SHA-256, e.g. sha256 darwin-arm64
  from                     the address this connection comes from, as the agent sees it
OS is linux, darwin or windows; ARCH is amd64 or arm64.`

// getCommand is a parsed exec command of the get user.
type getCommand struct {
	verb     string // install, install-windows, download, download-gz, sha256, from
	platform string // os-arch, for download and sha256
}

// parseGetCommand accepts exactly the commands getUsage lists.
func parseGetCommand(line string) (getCommand, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 1 && (f[0] == "install" || f[0] == "install-windows" || f[0] == "from"):
		return getCommand{verb: f[0]}, nil
	case len(f) == 2 && (f[0] == "download" || f[0] == "download-gz" || f[0] == "sha256"):
		if !knownPlatform(f[1]) {
			return getCommand{}, fmt.Errorf("no plug binary for %q\n%s", f[1], getUsage)
		}
		return getCommand{verb: f[0], platform: f[1]}, nil
	}
	return getCommand{}, fmt.Errorf("%q is not offered\n%s", line, getUsage)
}

func knownPlatform(p string) bool {
	goos, arch, ok := strings.Cut(p, "-")
	return ok && (goos == "linux" || goos == "darwin" || goos == "windows") && (arch == "amd64" || arch == "arm64")
}

// Server serves get connections. Set the exported fields, then call Serve
// for each connection the agent has authenticated as User.
type Server struct {
	// BinDir holds the CLI binaries served, gzipped, named
	// plug-<os>-<arch>[.exe].gz, and the SHA256SUMS of the uncompressed
	// binaries (named plug-<os>-<arch>[.exe]).
	BinDir string
	// PublicAddr is the host:port developers reach the agent by, if known;
	// the installer uses it when it is not given one.
	PublicAddr string
	// PublicAddrHow says how the agent found PublicAddr when it found it
	// itself (tunnel.PublicAddresser); the installer tells the developer,
	// with how to give another address.
	PublicAddrHow string
	// HostKey is the agent's host key, which the installer pins.
	HostKey ssh.PublicKey
	// Version is the agent's version, named in the installer.
	Version string
	// Network names the source network of a connection: the downloads of
	// one network share maxGetPerNetwork slots. Nil: its IP address.
	Network func(net.Addr) string

	mu        sync.Mutex
	slots     int            // downloads in progress
	byNetwork map[string]int // of those, by source network
}

// binaryName is the file in BinDir holding the binary for platform os-arch.
func binaryName(platform string) string {
	name := "plug-" + platform
	if strings.HasPrefix(platform, "windows-") {
		name += ".exe"
	}
	return name
}

// Serve runs a get connection: one session with one exec. It returns when
// the connection ends, at the latest after getTimeout.
func (s *Server) Serve(conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	go refuseRequests(reqs)
	limit := time.AfterFunc(getTimeout, func() { conn.Close() })
	defer limit.Stop()
	idle := time.AfterFunc(getStartTimeout, func() { conn.Close() })
	defer idle.Stop()
	served := false
	for nc := range chans {
		if nc.ChannelType() != "session" || served {
			nc.Reject(ssh.Prohibited, getUsage)
			continue
		}
		served = true
		go s.session(conn, nc, func() { idle.Stop() })
	}
}

func refuseRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		if req.WantReply {
			req.Reply(false, nil)
		}
	}
}

// session runs the session's one command and reports its exit status;
// started is called when it begins. A shell gets the usage; pty, env,
// subsystems and the like are refused.
func (s *Server) session(conn ssh.Conn, nc ssh.NewChannel, started func()) {
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	for req := range reqs {
		var cmd struct{ Command string }
		switch {
		case req.Type == "exec" && ssh.Unmarshal(req.Payload, &cmd) == nil && len(cmd.Command) <= maxGetCommand:
		case req.Type == "shell":
			cmd.Command = ""
		default:
			req.Reply(false, nil)
			continue
		}
		req.Reply(true, nil)
		started()
		status := uint32(0)
		if err := s.run(conn, ch, cutter(conn, ch), cmd.Command); err != nil {
			fmt.Fprintf(ch.Stderr(), "plug agent: %v\n", err)
			status = 1
		}
		ch.CloseWrite()
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		go refuseRequests(reqs)
		return
	}
}

// cutter is how a session's download slower than the agent asks is cut:
// why goes out as the session's exit signal (an SSH request, which no
// window holds back; plug's CLI shows it) and on its stderr if its window
// lets it, and the connection is closed.
func cutter(conn ssh.Conn, ch ssh.Channel) func(why string) {
	return func(why string) {
		go fmt.Fprintf(ch.Stderr(), "plug agent: %s\n", why)
		ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: "ALRM", Error: why}))
		conn.Close()
	}
}

// run runs one command line of the get user, its output into w; a
// download slower than minGetRate is cut with cut.
func (s *Server) run(conn ssh.Conn, w io.Writer, cut func(why string), line string) error {
	cmd, err := parseGetCommand(line)
	if err != nil {
		return err
	}
	switch cmd.verb {
	case "install":
		return s.writeInstaller(w, conn.RemoteAddr(), false)
	case "install-windows":
		return s.writeInstaller(w, conn.RemoteAddr(), true)
	case "from":
		_, err := fmt.Fprintln(w, sourceIP(conn.RemoteAddr()))
		return err
	case "download", "download-gz":
		network := s.networkOf(conn.RemoteAddr())
		if err := s.takeSlot(network); err != nil {
			return err
		}
		defer s.giveSlot(network)
		rw := &rateWriter{w: w}
		stop := rw.enforce(minGetRate, getRateWindow, cut)
		defer stop()
		return s.writeBinary(rw, cmd.platform, cmd.verb == "download-gz")
	default:
		return s.writeDigest(w, cmd.platform)
	}
}

// writeBinary copies the gzipped binary for platform from BinDir, as it is
// stored when gzipped, else uncompressed.
func (s *Server) writeBinary(w io.Writer, platform string, gzipped bool) error {
	name := binaryName(platform) + ".gz"
	f, err := os.Open(filepath.Join(s.BinDir, name))
	if err != nil {
		return fmt.Errorf("this agent has no plug binary for %s (%s is missing from its image)", platform, name)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() || info.Size() > maxBinarySize {
		return fmt.Errorf("the plug binary for %s is not a file of at most %d MiB", platform, maxBinarySize>>20)
	}
	if gzipped {
		_, err = io.Copy(w, io.LimitReader(f, info.Size()))
		return err
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s in the agent's image is not gzipped: %v", name, err)
	}
	n, err := io.Copy(w, io.LimitReader(z, maxBinarySize+1))
	if err == nil && n > maxBinarySize {
		err = fmt.Errorf("the plug binary for %s is larger than %d MiB", platform, maxBinarySize>>20)
	}
	return err
}

// writeDigest writes the hex SHA-256 of the binary for platform, as
// BinDir/SHA256SUMS lists it.
func (s *Server) writeDigest(w io.Writer, platform string) error {
	digest, err := lookupDigest(filepath.Join(s.BinDir, "SHA256SUMS"), binaryName(platform))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, digest)
	return err
}

// lookupDigest finds name in a sha256sum listing ("HEX  NAME" or
// "HEX *NAME" per line).
func lookupDigest(sumsPath, name string) (string, error) {
	f, err := os.Open(sumsPath)
	if err != nil {
		return "", errors.New("this agent has no SHA256SUMS beside its binaries")
	}
	defer f.Close()
	lines := bufio.NewScanner(io.LimitReader(f, maxSumsSize))
	for lines.Scan() {
		digest, file, ok := strings.Cut(lines.Text(), " ")
		file = strings.TrimLeft(file, " *")
		if ok && file == name && len(digest) == 64 {
			return digest, nil
		}
	}
	return "", fmt.Errorf("SHA256SUMS lists no %s", name)
}

// networkOf is the source network addr counts under.
func (s *Server) networkOf(addr net.Addr) string {
	if s.Network != nil {
		return s.Network(addr)
	}
	host, _, _ := net.SplitHostPort(addr.String())
	return host
}

// takeSlot takes one of the download slots for a connection from network,
// or says why there is none.
func (s *Server) takeSlot(network string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.slots >= maxGetSessions:
		return fmt.Errorf("the agent is serving %d downloads already; try again in a minute", maxGetSessions)
	case s.byNetwork[network] >= maxGetPerNetwork:
		return fmt.Errorf("the agent is serving %d downloads to your network already; try again in a minute", maxGetPerNetwork)
	}
	if s.byNetwork == nil {
		s.byNetwork = map[string]int{}
	}
	s.slots++
	s.byNetwork[network]++
	return nil
}

func (s *Server) giveSlot(network string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots--
	if s.byNetwork[network]--; s.byNetwork[network] == 0 {
		delete(s.byNetwork, network)
	}
}

// rateWriter counts what is written through it.
type rateWriter struct {
	w       io.Writer
	written atomic.Int64
}

func (r *rateWriter) Write(b []byte) (int, error) {
	n, err := r.w.Write(b)
	r.written.Add(int64(n))
	return n, err
}

// enforce calls cut, once, when less than rate bytes a second went through
// r over a window; the returned func stops the watch.
func (r *rateWriter) enforce(rate int64, window time.Duration, cut func(why string)) (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(window)
		defer tick.Stop()
		last := int64(0)
		for {
			select {
			case <-tick.C:
			case <-done:
				return
			}
			now := r.written.Load()
			if got := now - last; float64(got) < float64(rate)*window.Seconds() {
				cut(fmt.Sprintf("the download was cut: it took %d KiB in the last %s, under the %d KiB/s the agent asks of a download so that slow ones do not hold its %d slots; try again on a faster link", got>>10, window, rate>>10, maxGetSessions))
				return
			}
			last = now
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}
