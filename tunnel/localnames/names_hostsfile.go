//go:build darwin || windows

package localnames

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

// NewResolver repairs what crashed runs left in the hosts file, and checks
// that the file may be written.
func NewResolver(_ string, say func(string)) (Resolver, error) {
	r := &fileResolver{path: HostsPath, pid: os.Getpid()}
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

func (r *fileResolver) Update(lines []HostLine) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	content, err := os.ReadFile(r.path)
	if err != nil {
		return err
	}
	return r.write(withBlock(content, r.pid, lines))
}

func (r *fileResolver) Start(cmd *exec.Cmd) error { return cmd.Start() }

// Close removes the run's block.
func (r *fileResolver) Close() error { return r.Update(nil) }

// write replaces the hosts file's content in place: the file keeps its
// owner and the access plug setup granted.
func (r *fileResolver) write(content []byte) error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_TRUNC, 0)
	if os.IsPermission(err) {
		return fmt.Errorf("cannot write %s: run plug setup once as an administrator (%s); it lets you change it", r.path, SetupHow)
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

// Helper is the names helper of Linux, which other systems do not need:
// it only says so.
func Helper([]string) int {
	fmt.Fprintln(os.Stderr, "plug: "+HelperArg+" is run by plug itself, on Linux")
	return 2
}
