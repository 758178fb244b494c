//go:build darwin || windows

package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// fileResolver is the resolver of macOS and Windows: a block of the
// machine's hosts file, which plug setup lets the developer write (see
// hostsblock.go). Every program on the machine sees the names while the
// run lasts, not only CMD.
type fileResolver struct {
	path string
	pid  int
	mu   sync.Mutex
}

// newResolver repairs what crashed runs left in the hosts file, and checks
// that the file may be written.
func newResolver(_ string, say func(string)) (resolver, error) {
	r := &fileResolver{path: hostsPath, pid: os.Getpid()}
	content, err := os.ReadFile(r.path)
	if err != nil {
		return nil, err
	}
	cleaned, gone := withoutBlocks(content, processAlive)
	if err := r.write(cleaned); err != nil {
		return nil, err
	}
	if len(gone) > 0 {
		say(fmt.Sprintf("removed the cluster names that %d plug run(s) left in %s when they ended without cleaning up (process %s)", len(gone), r.path, joinInts(gone)))
	}
	return r, nil
}

func (r *fileResolver) update(lines []hostLine) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	content, err := os.ReadFile(r.path)
	if err != nil {
		return err
	}
	return r.write(withBlock(content, r.pid, lines))
}

func (r *fileResolver) start(cmd *exec.Cmd) error { return cmd.Start() }

// close removes the run's block.
func (r *fileResolver) close() error { return r.update(nil) }

// write replaces the hosts file's content in place: the file keeps its
// owner and the access plug setup granted.
func (r *fileResolver) write(content []byte) error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_TRUNC, 0)
	if os.IsPermission(err) {
		return fmt.Errorf("cannot write %s: run plug setup once as an administrator (%s); it lets you change it", r.path, setupHow)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
