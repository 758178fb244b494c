//go:build linux

package smb

import (
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Changes made on disk, not through the server (by the workload beside
// it), are told to watching clients too: the directories clients watch
// (and, for a watch of a tree, the directories beneath, up to
// maxFSWatches in all) are watched with inotify for names added, removed
// and renamed, and for the watched directory itself being deleted. A
// directory made on disk beneath a watched tree is watched from when it
// is told; what is made in it before that is not told.
// Changes of contents and attributes made on disk are not told. The
// server's own changes are told when it makes them; inotify's report of
// each, read fsSettle later, is dropped.
const (
	maxFSWatches = 8192
	fsSettle     = 50 * time.Millisecond
	fsOwnExpiry  = 5 * time.Second
	maxFSOwn     = 4096
	fsMask       = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_ONLYDIR
)

// fsWatch is the server's inotify instance.
type fsWatch struct {
	mu    sync.Mutex // the fields below
	f     *os.File   // nil until a directory is watched, and after close
	byWD  map[int32]*fsDir
	byDir map[string]*fsDir
	own   map[fsChange]fsOwn // changes the server made and told
	done  bool
}

// fsDir is a watched directory and how many watches need it.
type fsDir struct {
	wd   int32
	path string
	refs int
}

// fsChange is a name that appeared (added) or went, in a path.
type fsChange struct {
	path  string
	added bool
}

type fsOwn struct {
	n  int
	at time.Time
}

// fsAdd adds an inotify watch of the directory path for one more user and
// reports whether it is watched.
func (s *Server) fsAdd(path string) bool {
	fw := &s.fsw
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if d := fw.byDir[path]; d != nil {
		d.refs++
		return true
	}
	if fw.done || len(fw.byDir) >= maxFSWatches {
		return false
	}
	if fw.f == nil {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return false
		}
		fw.f = os.NewFile(uintptr(fd), "inotify")
		fw.byWD, fw.byDir, fw.own = map[int32]*fsDir{}, map[string]*fsDir{}, map[fsChange]fsOwn{}
		go s.fsRead(fw.f)
	}
	dfd, err := s.root.openDir(path)
	if err != nil {
		return false
	}
	wd, err := unix.InotifyAddWatch(int(fw.f.Fd()), procPath(dfd), fsMask)
	unix.Close(dfd)
	if err != nil {
		return false
	}
	if d := fw.byWD[int32(wd)]; d != nil {
		// The same directory under another name (a link inside).
		d.refs++
		fw.byDir[path] = d
		return true
	}
	d := &fsDir{wd: int32(wd), path: path, refs: 1}
	fw.byWD[d.wd], fw.byDir[path] = d, d
	return true
}

// fsRelease drops one user of the watch of path.
func (s *Server) fsRelease(path string) {
	fw := &s.fsw
	fw.mu.Lock()
	defer fw.mu.Unlock()
	d := fw.byDir[path]
	if d == nil {
		return
	}
	d.refs--
	if d.refs > 0 {
		return
	}
	for p, x := range fw.byDir {
		if x == d {
			delete(fw.byDir, p)
		}
	}
	delete(fw.byWD, d.wd)
	if fw.f != nil {
		unix.InotifyRmWatch(int(fw.f.Fd()), uint32(d.wd))
	}
}

// fsClose stops watching the file system.
func (s *Server) fsClose() {
	fw := &s.fsw
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.done = true
	if fw.f != nil {
		fw.f.Close()
		fw.f = nil
	}
}

// fsTold notes a change the server made itself and told, so that
// inotify's report of it is dropped.
func (s *Server) fsTold(path string, action uint32) {
	fw := &s.fsw
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.own == nil || len(fw.byDir) == 0 {
		return
	}
	now := time.Now()
	if len(fw.own) >= maxFSOwn {
		for k, v := range fw.own {
			if now.Sub(v.at) > fsOwnExpiry {
				delete(fw.own, k)
			}
		}
		if len(fw.own) >= maxFSOwn {
			clear(fw.own)
		}
	}
	k := fsChange{path, action == notifyAdded || action == notifyRenamedNew}
	o := fw.own[k]
	fw.own[k] = fsOwn{o.n + 1, now}
}

// ownChange reports (and forgets) whether the server made the change k
// itself lately.
func (fw *fsWatch) ownChange(k fsChange) bool {
	o, ok := fw.own[k]
	if !ok {
		return false
	}
	if o.n <= 1 {
		delete(fw.own, k)
	} else {
		fw.own[k] = fsOwn{o.n - 1, o.at}
	}
	return time.Since(o.at) <= fsOwnExpiry
}

// fsEvent is a change read from inotify, resolved to a path.
type fsEvent struct {
	path   string
	action uint32
	isDir  bool
	gone   bool // the watched directory itself was deleted
}

// fsRead reads inotify's events until f closes, and tells each change
// the server did not make itself fsSettle after reading it.
func (s *Server) fsRead(f *os.File) {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		time.Sleep(fsSettle)
		for _, e := range s.fsParse(buf[:n]) {
			if e.gone {
				s.watchedGone(e.path)
				continue
			}
			if e.isDir && (e.action == notifyAdded || e.action == notifyRenamedNew) {
				s.watchNewDir(e.path)
			}
			s.tell(e.path, e.action, e.isDir, 0, false)
		}
	}
}

// fsParse turns inotify's events into changes, dropping the server's own.
// A move within one directory is a rename; across directories, a remove
// and an add.
func (s *Server) fsParse(b []byte) []fsEvent {
	fw := &s.fsw
	fw.mu.Lock()
	defer fw.mu.Unlock()
	type raw struct {
		wd           int32
		mask, cookie uint32
		name         string
	}
	var evs []raw
	for len(b) >= unix.SizeofInotifyEvent {
		le := binary.NativeEndian
		wd, mask, cookie, l := int32(le.Uint32(b)), le.Uint32(b[4:]), le.Uint32(b[8:]), int(le.Uint32(b[12:]))
		if unix.SizeofInotifyEvent+l > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+l]), "\x00")
		b = b[unix.SizeofInotifyEvent+l:]
		evs = append(evs, raw{wd, mask, cookie, name})
	}
	var out []fsEvent
	for _, e := range evs {
		d := fw.byWD[e.wd]
		if d == nil {
			continue
		}
		if e.mask&unix.IN_DELETE_SELF != 0 {
			out = append(out, fsEvent{path: d.path, gone: true})
			continue
		}
		if e.name == "" || validComponent(wireName(e.name)) != wire.StatusSuccess {
			continue
		}
		p := e.name
		if d.path != "" {
			p = d.path + "/" + e.name
		}
		var action uint32
		switch {
		case e.mask&unix.IN_CREATE != 0:
			action = notifyAdded
		case e.mask&unix.IN_DELETE != 0:
			action = notifyRemoved
		case e.mask&(unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0:
			paired := false
			for _, x := range evs {
				paired = paired || x.cookie == e.cookie && x.wd == e.wd && x.mask&(unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != e.mask&(unix.IN_MOVED_FROM|unix.IN_MOVED_TO)
			}
			switch {
			case e.mask&unix.IN_MOVED_FROM != 0 && paired:
				action = notifyRenamedOld
			case e.mask&unix.IN_MOVED_FROM != 0:
				action = notifyRemoved
			case paired:
				action = notifyRenamedNew
			default:
				action = notifyAdded
			}
		default:
			continue
		}
		if fw.ownChange(fsChange{p, action == notifyAdded || action == notifyRenamedNew}) {
			continue
		}
		out = append(out, fsEvent{path: p, action: action, isDir: e.mask&unix.IN_ISDIR != 0})
	}
	return out
}

// fsAddTree watches the directories beneath dir (dir itself is watched
// already), as long as maxFSWatches allows, and returns their paths.
func (s *Server) fsAddTree(dir string) []string {
	var added []string
	queue := []string{dir}
	buf := make([]byte, dirReadBufSize)
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		dfd, err := s.root.open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			continue
		}
		for _, name := range subdirs(dfd, buf) {
			p := name
			if d != "" {
				p = d + "/" + name
			}
			if !s.fsAdd(p) {
				unix.Close(dfd)
				return added
			}
			added = append(added, p)
			queue = append(queue, p)
		}
		unix.Close(dfd)
	}
	return added
}

// subdirs are the names of the directories (not links) in the directory
// fd, as getdents types them.
func subdirs(fd int, buf []byte) []string {
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			return names
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := string(b[19:reclen])
			if i := strings.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if b[18] == unix.DT_DIR && name != "." && name != ".." {
				names = append(names, name)
			}
			b = b[reclen:]
		}
	}
}

// watchNewDir watches the new directory path for the tree watches that
// see it.
func (s *Server) watchNewDir(path string) {
	w := &s.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	for nw := range w.all {
		if _, ok := relativeTo(nw.dir, path, true); ok && nw.tree && s.fsAdd(path) {
			nw.fsDirs = append(nw.fsDirs, path)
		}
	}
}
