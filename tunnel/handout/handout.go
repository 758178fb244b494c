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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// User is the SSH user name of the handout.
const User = "get"

// The caps of the handout. A get connection must run its command within
// getStartTimeout, and ends after getTimeout whatever it does. Only a
// download in progress takes one of the maxGetSessions slots, and a
// download that makes no progress for getIdleTimeout (the client stopped
// reading) is cut. (The agent also bounds get connections per source
// address, as it does handshakes.)
const (
	maxGetSessions  = 4                // downloads served at once by an agent
	getTimeout      = 5 * time.Minute  // a get connection is closed after this
	getStartTimeout = 10 * time.Second // a get connection that runs no command by then is closed
	getIdleTimeout  = 30 * time.Second // a download that makes no progress for this long is cut
	maxGetCommand   = 64               // bytes of an exec command
	maxBinarySize   = 512 << 20        // a served binary, gzipped or not, larger than this is refused
	maxSumsSize     = 64 << 10         // SHA256SUMS larger than this is refused
)

const getUsage = `the get user runs one of:
  install                  the installer for macOS and Linux:  ... get@HOST install | sh -s -- HOST PORT
  install-windows          the installer for Git Bash:         ... get@HOST install-windows | bash -s -- HOST PORT
  download-gz OS-ARCH      the plug binary, gzipped, e.g. download-gz linux-amd64
  download OS-ARCH         the plug binary, e.g. download linux-amd64
  sha256 OS-ARCH           its SHA-256, e.g. sha256 darwin-arm64
OS is linux, darwin or windows; ARCH is amd64 or arm64.`

// getCommand is a parsed exec command of the get user.
type getCommand struct {
	verb     string // install, install-windows, download, download-gz, sha256
	platform string // os-arch, for download and sha256
}

// parseGetCommand accepts exactly the commands getUsage lists.
func parseGetCommand(line string) (getCommand, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 1 && (f[0] == "install" || f[0] == "install-windows"):
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

	slotsOnce sync.Once
	slots     chan struct{} // one token per download in progress
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
	s.slotsOnce.Do(func() { s.slots = make(chan struct{}, maxGetSessions) })
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
		if err := s.run(conn, ch, cmd.Command); err != nil {
			fmt.Fprintf(ch.Stderr(), "plug agent: %v\n", err)
			status = 1
		}
		ch.CloseWrite()
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		go refuseRequests(reqs)
		return
	}
}

func (s *Server) run(conn ssh.Conn, w io.Writer, line string) error {
	cmd, err := parseGetCommand(line)
	if err != nil {
		return err
	}
	switch cmd.verb {
	case "install":
		return s.writeInstaller(w, false)
	case "install-windows":
		return s.writeInstaller(w, true)
	case "download", "download-gz":
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			return fmt.Errorf("the agent is serving %d downloads already; try again in a minute", maxGetSessions)
		}
		idle := time.AfterFunc(getIdleTimeout, func() { conn.Close() })
		defer idle.Stop()
		return s.writeBinary(&progressWriter{w: w, idle: idle}, cmd.platform, cmd.verb == "download-gz")
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

// progressWriter pushes its idle timer back at every write that got
// through.
type progressWriter struct {
	w    io.Writer
	idle *time.Timer
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if n > 0 {
		p.idle.Reset(getIdleTimeout)
	}
	return n, err
}
