package tunnel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// The user "get" needs no authentication and may do one thing per
// connection: run one of getCommands in a session. Everything else is
// refused: no shell, no forwarding, no other channel, no global request.
const (
	maxGetSessions = 4                // get connections served at once by an agent
	getTimeout     = 5 * time.Minute  // a get connection is closed after this
	busyTimeout    = 10 * time.Second // a get connection turned away is closed after this
	maxGetCommand  = 64               // bytes of an exec command
	maxBinarySize  = 512 << 20        // a served binary larger than this is refused
	maxSumsSize    = 64 << 10         // SHA256SUMS larger than this is refused
)

const getUsage = `the get user runs one of:
  install                  the installer for macOS and Linux:  ... get@HOST install | sh -s -- HOST PORT
  install-windows          the installer for Git Bash:         ... get@HOST install-windows | bash -s -- HOST PORT
  download OS-ARCH         the plug binary, e.g. download linux-amd64
  sha256 OS-ARCH           its SHA-256, e.g. sha256 darwin-arm64
OS is linux, darwin or windows; ARCH is amd64 or arm64.`

// getCommand is a parsed exec command of the get user.
type getCommand struct {
	verb     string // install, install-windows, download, sha256
	platform string // os-arch, for download and sha256
}

// parseGetCommand accepts exactly the commands getUsage lists.
func parseGetCommand(line string) (getCommand, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 1 && (f[0] == "install" || f[0] == "install-windows"):
		return getCommand{verb: f[0]}, nil
	case len(f) == 2 && (f[0] == "download" || f[0] == "sha256"):
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

// binaryName is the file in BinDir holding the binary for platform os-arch.
func binaryName(platform string) string {
	name := "plug-" + platform
	if strings.HasPrefix(platform, "windows-") {
		name += ".exe"
	}
	return name
}

// serveGet runs a get connection: one session with one exec.
func (a *Agent) serveGet(conn *ssh.ServerConn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	go refuseRequests(reqs)
	busy := false
	select {
	case a.getSlots <- struct{}{}:
		defer func() { <-a.getSlots }()
	default:
		busy = true
	}
	limit := getTimeout
	if busy {
		limit = busyTimeout
	}
	timer := time.AfterFunc(limit, func() { conn.Close() })
	defer timer.Stop()
	served := false
	for nc := range chans {
		switch {
		case busy:
			nc.Reject(ssh.ResourceShortage, fmt.Sprintf("the agent is serving %d downloads already; try again in a minute", maxGetSessions))
		case nc.ChannelType() != "session" || served:
			nc.Reject(ssh.Prohibited, getUsage)
		default:
			served = true
			go a.getSession(nc)
		}
	}
}

func refuseRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		if req.WantReply {
			req.Reply(false, nil)
		}
	}
}

// getSession runs the session's one command and reports its exit status.
// A shell gets the usage; pty, env, subsystems and the like are refused.
func (a *Agent) getSession(nc ssh.NewChannel) {
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
		status := uint32(0)
		if err := a.runGet(ch, cmd.Command); err != nil {
			fmt.Fprintf(ch.Stderr(), "plug agent: %v\n", err)
			status = 1
		}
		ch.CloseWrite()
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		go refuseRequests(reqs)
		return
	}
}

func (a *Agent) runGet(w io.Writer, line string) error {
	cmd, err := parseGetCommand(line)
	if err != nil {
		return err
	}
	switch cmd.verb {
	case "install":
		return a.writeInstaller(w, false)
	case "install-windows":
		return a.writeInstaller(w, true)
	case "download":
		return a.writeBinary(w, cmd.platform)
	default:
		return a.writeDigest(w, cmd.platform)
	}
}

// writeBinary copies the binary for platform from BinDir.
func (a *Agent) writeBinary(w io.Writer, platform string) error {
	f, err := os.Open(filepath.Join(a.BinDir, binaryName(platform)))
	if err != nil {
		return fmt.Errorf("this agent has no plug binary for %s (%s is missing from its image)", platform, binaryName(platform))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() || info.Size() > maxBinarySize {
		return fmt.Errorf("the plug binary for %s is not a file of at most %d MiB", platform, maxBinarySize>>20)
	}
	_, err = io.Copy(w, io.LimitReader(f, info.Size()))
	return err
}

// writeDigest writes the hex SHA-256 of the binary for platform, as
// BinDir/SHA256SUMS lists it.
func (a *Agent) writeDigest(w io.Writer, platform string) error {
	digest, err := lookupDigest(filepath.Join(a.BinDir, "SHA256SUMS"), binaryName(platform))
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
