//go:build linux

package smb

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"time"

	"plug/smb/internal/wire"
)

// Change notification filters and actions (MS-FSCC 2.4.42, 2.7.1).
const (
	filterFileName   uint32 = 0x001
	filterDirName    uint32 = 0x002
	filterAttributes uint32 = 0x004
	filterSize       uint32 = 0x008
	filterLastWrite  uint32 = 0x010
	// notNamed, with a filter, marks a change that watches seeing file
	// names are not told (the attribute change of a rename, which they
	// saw as the rename itself, as Windows does).
	notNamed uint32 = 0x80000000

	notifyAdded      uint32 = 1
	notifyRemoved    uint32 = 2
	notifyModified   uint32 = 3
	notifyRenamedOld uint32 = 4
	notifyRenamedNew uint32 = 5

	watchTree = 0x0001

	// maxNotifyEvents caps the changes a watch keeps between requests;
	// past it the client is told to enumerate the directory again.
	maxNotifyEvents = 1024
	// maxRecentChanges caps the changes the server made that it keeps
	// for watches whose first request came before them (see catchUp).
	maxRecentChanges = 256
)

// notifyWatch is the change notification state of a directory open:
// changes that arrive between CHANGE_NOTIFY requests are kept for the
// next one. Its fields are guarded by watches.mu.
type notifyWatch struct {
	o        *open
	dir      string
	tree     bool
	filter   uint32
	events   []notifyEvent
	overflow bool
	waiting  []*notifyWait // pending requests, oldest first
	// fsDirs are the directories watched with inotify for it; gone is set
	// once its directory is deleted or its delete is pending.
	fsDirs []string
	gone   bool
	// size is the buffer size of the first request: as on Windows, no
	// response is larger, whatever later requests ask.
	size uint32
}

type notifyEvent struct {
	action uint32
	name   string // relative to the watched directory, '\'-separated
}

// notifyWait is a pending CHANGE_NOTIFY.
type notifyWait struct {
	op    *asyncOp
	limit uint32
}

// watches are the server's change notifications.
type watches struct {
	mu  sync.Mutex
	all map[*notifyWatch]struct{}
	// recent holds the latest changes the server made, a ring of
	// maxRecentChanges whose oldest is at recent[next] once it is full;
	// lost is when the newest change it dropped was told.
	recent []change
	next   int
	lost   int64
}

// change is a change told to the watches that see it.
type change struct {
	path   string
	action uint32
	// filter is what changed (filterFileName, ...), with notNamed.
	filter uint32
	at     int64 // when it was told, in Unix nanoseconds
}

// keep adds ch to the recent changes, dropping the oldest when they are
// maxRecentChanges.
func (w *watches) keep(ch change) {
	if len(w.recent) < maxRecentChanges {
		w.recent = append(w.recent, ch)
		return
	}
	w.lost = w.recent[w.next].at
	w.recent[w.next] = ch
	w.next = (w.next + 1) % maxRecentChanges
}

// catchUp gives the new watch nw the changes the server made after nw's
// first request arrived (at arrived, Unix nanoseconds) and before it was
// handled: each connection is read and served on its own, so a change a
// client asked for on another connection after it sent the request may
// be made first, and is then told as Windows, handling requests as they
// come, would tell it. A change made before the request arrived is not
// told: its client could have seen it done before sending the request.
// When some of those changes are no longer kept, nw starts overflowed
// (the client is told to list the directory again).
func (w *watches) catchUp(nw *notifyWatch, arrived int64) {
	if w.lost > arrived {
		nw.overflow = true
		return
	}
	for i := range w.recent {
		if ch := w.recent[(w.next+i)%len(w.recent)]; ch.at > arrived {
			nw.add(ch)
		}
	}
}

// changeNotify answers CHANGE_NOTIFY: at once when changes are waiting,
// else later.
func (c *conn) changeNotify(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
	flags := le.Uint16(b[2:])
	limit := le.Uint32(b[4:])
	filter := le.Uint32(b[24:])
	o, status := c.fileFor(r, b[8:24])
	if status != wire.StatusSuccess {
		return status
	}
	if limit > c.maxSize() || !c.chargeOK(r, limit) || !o.isDir {
		return wire.StatusInvalidParameter
	}
	if o.access&accReadData == 0 {
		return wire.StatusAccessDenied
	}
	c.srv.files.mu.Lock()
	dir, pending := o.node.path, o.node.deletePending
	c.srv.files.mu.Unlock()
	if pending {
		return wire.StatusDeletePending
	}
	w := &c.srv.watches
	w.mu.Lock()
	o.mu.Lock()
	nw := o.notify
	if nw == nil {
		nw = &notifyWatch{o: o, dir: dir, tree: flags&watchTree != 0, filter: filter, size: limit}
		o.notify = nw
		if w.all == nil {
			w.all = map[*notifyWatch]struct{}{}
		}
		w.all[nw] = struct{}{}
		w.catchUp(nw, r.arrived)
		o.mu.Unlock()
		w.mu.Unlock()
		c.srv.fsWatchFor(nw)
		w.mu.Lock()
		o.mu.Lock()
	}
	limit = min(limit, nw.size)
	o.mu.Unlock()
	if nw.gone {
		w.mu.Unlock()
		return wire.StatusDeletePending
	}
	if len(nw.waiting) == 0 && (len(nw.events) > 0 || nw.overflow) {
		st, body := nw.take(limit)
		w.mu.Unlock()
		if body != nil {
			r.out = body(r.out)
		}
		return st
	}
	w.mu.Unlock()
	wait := &notifyWait{limit: limit}
	op, st := c.goAsync(r, func() { c.srv.watches.end(nw, wait, wire.StatusCancelled) })
	if op == nil {
		return st
	}
	wait.op = op
	w.mu.Lock()
	o.mu.Lock()
	closed := o.notify != nw
	o.mu.Unlock()
	switch {
	case closed:
		w.mu.Unlock()
		op.complete(wire.StatusNotifyCleanup, nil)
	case len(nw.waiting) == 0 && (len(nw.events) > 0 || nw.overflow):
		st, body := nw.take(limit)
		w.mu.Unlock()
		op.complete(st, body)
	default:
		nw.waiting = append(nw.waiting, wait)
		w.mu.Unlock()
	}
	return wire.StatusPending
}

// take removes the kept changes for a response of at most limit bytes.
func (nw *notifyWatch) take(limit uint32) (uint32, func([]byte) []byte) {
	events, overflow := nw.events, nw.overflow
	nw.events, nw.overflow = nil, false
	size := 0
	for _, e := range events {
		size = wire.Align8(size) + 12 + wire.UTF16Len(e.name)
	}
	if overflow || size > int(limit) {
		return wire.StatusNotifyEnumDir, nil
	}
	return wire.StatusSuccess, func(b []byte) []byte {
		le := binary.LittleEndian
		b = le.AppendUint16(b, 9)
		b = le.AppendUint16(b, wire.HeaderSize+8)
		lenAt := len(b)
		b = le.AppendUint32(b, 0)
		data := len(b)
		prev := -1
		for _, e := range events {
			at := wire.Align8(len(b) - data)
			for len(b)-data < at {
				b = append(b, 0)
			}
			if prev >= 0 {
				le.PutUint32(b[data+prev:], uint32(at-prev))
			}
			prev = at
			b = le.AppendUint32(b, 0)
			b = le.AppendUint32(b, e.action)
			b = le.AppendUint32(b, uint32(wire.UTF16Len(e.name)))
			b = wire.AppendUTF16(b, e.name)
		}
		le.PutUint32(b[lenAt:], uint32(len(b)-data))
		return b
	}
}

// end completes the waiting request wait of nw with status, if it still
// waits.
func (w *watches) end(nw *notifyWatch, wait *notifyWait, status uint32) {
	w.mu.Lock()
	nw.waiting = slices.DeleteFunc(nw.waiting, func(x *notifyWait) bool { return x == wait })
	w.mu.Unlock()
	if wait.op != nil {
		wait.op.complete(status, nil)
	}
}

// cleanup ends a watch whose open closes: its waiting request completes
// with STATUS_NOTIFY_CLEANUP.
func (nw *notifyWatch) cleanup() {
	srv := nw.o.conn.srv
	w := &srv.watches
	w.mu.Lock()
	delete(w.all, nw)
	waiting, dirs := nw.waiting, nw.fsDirs
	nw.waiting, nw.fsDirs = nil, nil
	w.mu.Unlock()
	for _, d := range dirs {
		srv.fsRelease(d)
	}
	for _, wait := range waiting {
		wait.op.complete(wire.StatusNotifyCleanup, nil)
	}
}

// fsWatchFor watches nw's directory (and its tree) with inotify, unless
// nw ended meanwhile.
func (s *Server) fsWatchFor(nw *notifyWatch) {
	var dirs []string
	if s.fsAdd(nw.dir) {
		dirs = append(dirs, nw.dir)
		if nw.tree {
			dirs = append(dirs, s.fsAddTree(nw.dir)...)
		}
	}
	w := &s.watches
	w.mu.Lock()
	_, live := w.all[nw]
	if live {
		nw.fsDirs = append(nw.fsDirs, dirs...)
	}
	w.mu.Unlock()
	if !live {
		for _, d := range dirs {
			s.fsRelease(d)
		}
	}
}

// dirGone ends the waiting requests of the watches of the directories
// the node n (whose delete is pending) or the path dir (deleted on disk)
// names, with STATUS_DELETE_PENDING, as later requests of them end.
func (s *Server) dirGone(n *fileNode, dir string) {
	w := &s.watches
	w.mu.Lock()
	var waiting []*notifyWait
	for nw := range w.all {
		if n != nil && nw.o.node == n || n == nil && nw.dir == dir {
			nw.gone = true
			waiting = append(waiting, nw.waiting...)
			nw.waiting = nil
		}
	}
	w.mu.Unlock()
	for _, wait := range waiting {
		wait.op.complete(wire.StatusDeletePending, nil)
	}
}

// watchedGone is dirGone for a directory deleted on disk.
func (s *Server) watchedGone(dir string) { s.dirGone(nil, dir) }

// notifyChange tells the watches of the directories that see path that
// it changed.
func (s *Server) notifyChange(path string, action uint32, isDir bool) {
	s.notifyFiltered(path, action, isDir, 0)
}

// notifyFiltered is notifyChange for a change that only filter (when
// set) selects: a size, an attribute, a time.
func (s *Server) notifyFiltered(path string, action uint32, isDir bool, filter uint32) {
	if action != notifyModified {
		s.fsTold(path, action)
	}
	s.tell(path, action, isDir, filter, true)
}

// tell tells the watches that see path of a change, made by the server
// (made) or on disk. The server's own changes are kept for watches whose
// request came before them (see catchUp); those made on disk are not, as
// they are told fsSettle after inotify reported them, later than they
// were made.
func (s *Server) tell(path string, action uint32, isDir bool, filter uint32, made bool) {
	if filter == 0 {
		filter = filterFileName
		if isDir {
			filter = filterDirName
		}
		if action == notifyModified {
			filter = filterSize | filterLastWrite
		}
	}
	ch := change{path: path, action: action, filter: filter}
	w := &s.watches
	w.mu.Lock()
	if made {
		ch.at = time.Now().UnixNano()
		w.keep(ch)
	}
	var ready []func()
	for nw := range w.all {
		if !nw.add(ch) {
			continue
		}
		if len(nw.waiting) > 0 {
			wait := nw.waiting[0]
			nw.waiting = nw.waiting[1:]
			st, body := nw.take(wait.limit)
			ready = append(ready, func() { wait.op.complete(st, body) })
		}
	}
	w.mu.Unlock()
	for _, f := range ready {
		f()
	}
}

// add keeps the change ch for nw's next request, if nw sees it, and
// reports whether it does.
func (nw *notifyWatch) add(ch change) bool {
	rel, ok := relativeTo(nw.dir, ch.path, nw.tree)
	if !ok || nw.filter&ch.filter&^notNamed == 0 || ch.filter&notNamed != 0 && nw.filter&filterFileName != 0 {
		return false
	}
	if n := len(nw.events); n > 0 && nw.events[n-1] == (notifyEvent{ch.action, rel}) {
		return false
	}
	if len(nw.events) >= maxNotifyEvents {
		nw.overflow = true
		nw.events = nil
	} else if !nw.overflow {
		nw.events = append(nw.events, notifyEvent{ch.action, rel})
	}
	return true
}

// relativeTo is path relative to dir, '\'-separated, when a watch of dir
// (of its whole tree with tree) sees it.
func relativeTo(dir, path string, tree bool) (string, bool) {
	rel := path
	if dir != "" {
		if !strings.HasPrefix(path, dir+"/") {
			return "", false
		}
		rel = path[len(dir)+1:]
	}
	if rel == "" || !tree && strings.Contains(rel, "/") {
		return "", false
	}
	return wirePath(rel), true
}
