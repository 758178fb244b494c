package localnames

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// fileResolver is the resolver of macOS and Windows: a block of the
// machine's hosts file, which plug setup lets the developer write (see
// hostsblock.go, and hostsfile.go for how it is written). Every program on
// the machine sees the names while the run lasts, not only CMD. It runs on
// every system, on a file of the caller's choosing.
type fileResolver struct {
	path   string // the hosts file
	backup string // the user's lines of it, kept before the run's first change
	pid    int    // the run's process, which names its block
	say    func(string)

	mu       sync.Mutex
	backedUp bool // the backup holds the user's lines as of the first change
}

// BackupName is the file, in the developer's plug directory, that keeps
// the hosts file's own lines (without any run's block) as they were before
// a run's first change, and before any change that moves them.
const BackupName = "hosts.plug-backup"

// NewHostsFileResolver is the resolver of a run, of process pid, that
// keeps its names in a block of the hosts file at path: it removes what
// crashed runs left there (which it says), and checks that the file may
// be written. backup is where the file's own lines are kept (BackupName).
// macOS and Windows use it on the machine's hosts file (NewResolver).
func NewHostsFileResolver(path, backup string, pid int, say func(string)) (Resolver, error) {
	r := &fileResolver{path: path, backup: backup, pid: pid, say: say}
	if err := r.edit(func(*hostsContent) {}); err != nil {
		return nil, err
	}
	return r, nil
}

// Update makes lines the run's block. The host names of lines that a
// block before the run's has too are answered by that block's run: they
// are returned, each with that run's process.
func (r *fileResolver) Update(lines []HostLine) (map[string]int, error) {
	var held map[string]int
	err := r.edit(func(h *hostsContent) {
		h.setBlock(r.pid, lines)
		before := h.heldBefore(r.pid)
		for _, l := range lines {
			for _, n := range l.Names {
				if pid, ok := before[n]; ok {
					if held == nil {
						held = map[string]int{}
					}
					held[n] = pid
				}
			}
		}
	})
	return held, err
}

func (r *fileResolver) Start(cmd *exec.Cmd) error { return cmd.Start() }

// Answer fails: every program of the machine reads the hosts file
// directly, so every name must be in it before CMD starts.
func (r *fileResolver) Answer(LookupFunc) error { return errHostsFileEager }

// errHostsFileEager is why a run that publishes its names in the machine's
// hosts file opens them all at start.
var errHostsFileEager = errors.New("the names go in this machine's hosts file, which programs read directly: every name gets its address and listeners when the run starts")

// Shared is true: every run on the machine has a block in the file.
func (r *fileResolver) Shared() bool { return true }

// Close removes the run's block.
func (r *fileResolver) Close() error {
	_, err := r.Update(nil)
	return err
}

// edit changes the file as change says, under its lock, having removed
// the blocks of runs whose process is gone (which it says). The user's lines are backed up before the run's first
// change, and before a change that writes over them (only when lines were
// added after the blocks, which a change moves before them).
func (r *fileResolver) edit(change func(*hostsContent)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := withLockedFile(r.path, func(f *os.File) error {
		old, err := readFrom(f)
		if err != nil {
			return err
		}
		h := parseHosts(old)
		gone := h.dropBlocks(func(pid int) bool { return pid == r.pid || processAlive(pid) })
		change(&h)
		content := h.render()
		keep := commonPrefix(old, content)
		if keep == len(old) && keep == len(content) {
			return nil
		}
		if start := h.blocksStart(); keep > start {
			keep = lineStart(content, start, keep)
		} else if keep > len(h.user) {
			keep = len(h.user) // not between the user's last line and plug's line end
		}
		if !r.backedUp || keep < len(h.user) {
			if err := writeBackup(r.backup, h.user); err != nil {
				return fmt.Errorf("cannot keep a backup of %s's own lines in %s, so it is not changed: %w", r.path, r.backup, err)
			}
			r.backedUp = true
		}
		if err := rewrite(f, old, content, keep); err != nil {
			return err
		}
		if len(gone) > 0 {
			r.say(fmt.Sprintf("removed the cluster names that %d plug run(s) left in %s when they ended without cleaning up (process %s)", len(gone), r.path, joinInts(gone)))
		}
		return nil
	})
	if os.IsPermission(err) {
		return fmt.Errorf("cannot write %s: your account may not; prepare this machine once with %s, which lets it", r.path, SetupHow)
	}
	return err
}

// lineStart is the start of the line of content that holds position at,
// not before from.
func lineStart(content []byte, from, at int) int {
	for i := at; i > from; i-- {
		if content[i-1] == '\n' {
			return i
		}
	}
	return from
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
