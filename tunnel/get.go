package tunnel

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// CLIDownload is what DownloadCLI fetched from an agent.
type CLIDownload struct {
	// AgentVersion is the agent's plug version, from its SSH version
	// string: the version of the binaries it hands out.
	AgentVersion string
	// Listed is the SHA-256 (hex) the agent's SHA256SUMS lists for the
	// binary; Got is the one of the bytes written.
	Listed, Got string
}

// maxDigestAnswer caps what the answer to "sha256 OS-ARCH" may be, and
// maxCLISize what a downloaded binary may unpack to.
const (
	maxDigestAnswer = 256
	maxCLISize      = 512 << 20
)

// DownloadCLI fetches the plug binary for platform ("linux-amd64", ...)
// from the agent's get user, gzipped, and writes it unpacked into w (at
// most maxCLISize bytes), over the host key cfg pins (cfg.User and
// cfg.Signer are not used: the get user takes no key). It asks the
// digest first, then the binary, on two connections, as the handout serves
// one command per connection. It does not judge the digests: the caller
// compares Listed and Got before it uses what it wrote.
func DownloadCLI(ctx context.Context, cfg ClientConfig, platform string, w io.Writer) (CLIDownload, error) {
	if cfg.Addr == "" || cfg.HostKey == nil {
		return CLIDownload{}, errors.New("tunnel: DownloadCLI needs Addr and HostKey")
	}
	cfg.User, cfg.Signer = getUser, nil
	if cfg.Run.Version == "" {
		cfg.Run.Version = Version
	}
	var digest bytes.Buffer
	version, err := getCommand(ctx, cfg, "sha256 "+platform, &limitedWriter{w: &digest, n: maxDigestAnswer})
	if err != nil {
		return CLIDownload{}, err
	}
	d := CLIDownload{AgentVersion: version, Listed: strings.TrimSpace(digest.String())}
	sum := sha256.New()
	unzip := gunzipTo(io.MultiWriter(w, sum))
	_, err = getCommand(ctx, cfg, "download-gz "+platform, unzip)
	if err := unzip.finish(err); err != nil {
		return d, err
	}
	d.Got = hex.EncodeToString(sum.Sum(nil))
	return d, nil
}

// gunzipTo returns a writer that takes a gzip stream and writes what it
// holds, up to maxCLISize bytes, into w; finish says how it ended.
func gunzipTo(w io.Writer) *gunzipWriter {
	r, pw := io.Pipe()
	g := &gunzipWriter{pw: pw, done: make(chan error, 1)}
	go func() {
		var n int64
		z, err := gzip.NewReader(r)
		if err == nil {
			n, err = io.Copy(w, io.LimitReader(z, maxCLISize+1))
		}
		switch {
		case err != nil:
			err = fmt.Errorf("the binary the agent handed out is not whole gzip: %w", err)
		case n > maxCLISize:
			err = fmt.Errorf("the binary the agent handed out unpacks to more than %d MiB", maxCLISize>>20)
		}
		r.CloseWithError(err)
		g.done <- err
	}()
	return g
}

// gunzipWriter is gunzipTo's writer.
type gunzipWriter struct {
	pw   *io.PipeWriter
	done chan error
}

func (g *gunzipWriter) Write(p []byte) (int, error) { return g.pw.Write(p) }

// finish ends the stream, whose sender ended with sent, waits until all
// of it is written, and returns the first failure: the sender's, or the
// stream's own (not whole gzip, or over the cap), which also cuts the
// sender short.
func (g *gunzipWriter) finish(sent error) error {
	g.pw.CloseWithError(sent)
	err := <-g.done
	if err == nil || (sent != nil && errors.Is(err, sent)) {
		return sent
	}
	return err
}

// getCommand runs command as the get user, its output into w, and returns
// the agent's version. What the agent writes on stderr is its error.
func getCommand(ctx context.Context, cfg ClientConfig, command string, w io.Writer) (string, error) {
	s := &Session{cfg: cfg}
	ctx, cancel := context.WithTimeout(ctx, getTimeout)
	defer cancel()
	conn, chans, reqs, abort, err := s.handshake(ctx)
	if err != nil {
		return "", err
	}
	defer abort()
	client := ssh.NewClient(conn, chans, reqs)
	defer client.Close()
	version := agentVersion(string(conn.ServerVersion()))
	session, err := client.NewSession()
	if err != nil {
		return version, unreachable(cfg.Addr, err)
	}
	defer session.Close()
	var stderr bytes.Buffer
	session.Stdout = w
	session.Stderr = &limitedWriter{w: &stderr, n: maxTextField}
	if err := session.Run(command); err != nil {
		if ctx.Err() != nil {
			return version, unreachable(cfg.Addr, ctx.Err())
		}
		why := printable(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "plug agent:")))
		if why == "" {
			why = err.Error()
		}
		return version, fmt.Errorf("the agent at %s did not hand out %q: %s", cfg.Addr, command, why)
	}
	return version, nil
}

// getTimeout bounds one command of the get user; the handout ends a get
// connection after as long.
const getTimeout = 5 * time.Minute

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	keep := p[:min(len(p), l.n)]
	l.n -= len(keep)
	if _, err := l.w.Write(keep); err != nil {
		return 0, err
	}
	return len(p), nil
}
