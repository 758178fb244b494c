//go:build linux

package smb

import (
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Access rights (MS-SMB2 2.2.13.1).
const (
	accReadData       uint32 = 0x00000001
	accWriteData      uint32 = 0x00000002
	accAppendData     uint32 = 0x00000004
	accReadEA         uint32 = 0x00000008
	accWriteEA        uint32 = 0x00000010
	accExecute        uint32 = 0x00000020
	accDeleteChild    uint32 = 0x00000040
	accReadAttr       uint32 = 0x00000080
	accWriteAttr      uint32 = 0x00000100
	accDelete         uint32 = 0x00010000
	accReadControl    uint32 = 0x00020000
	accWriteDAC       uint32 = 0x00040000
	accWriteOwner     uint32 = 0x00080000
	accSynchronize    uint32 = 0x00100000
	accSystemSecurity uint32 = 0x01000000
	accMaximumAllowed uint32 = 0x02000000
	genericAll        uint32 = 0x10000000
	genericExecute    uint32 = 0x20000000
	genericWrite      uint32 = 0x40000000
	genericRead       uint32 = 0x80000000

	// accInvalid are the bits no access mask may have.
	accInvalid uint32 = 0x0CE0FE00

	accGenericRead    = accReadControl | accSynchronize | accReadData | accReadAttr | accReadEA
	accGenericWrite   = accReadControl | accSynchronize | accWriteData | accAppendData | accWriteAttr | accWriteEA
	accGenericExecute = accReadControl | accSynchronize | accExecute | accReadAttr
)

// Share access.
const (
	shareRead   uint32 = 1
	shareWrite  uint32 = 2
	shareDelete uint32 = 4
)

// mapGeneric turns generic rights into the file rights they stand for.
func mapGeneric(a uint32) uint32 {
	if a&genericRead != 0 {
		a |= accGenericRead
	}
	if a&genericWrite != 0 {
		a |= accGenericWrite
	}
	if a&genericExecute != 0 {
		a |= accGenericExecute
	}
	if a&genericAll != 0 {
		a |= fileAllAccess
	}
	return a &^ (genericRead | genericWrite | genericExecute | genericAll)
}

// fileKey names a file across its names and opens; with stream, one of
// its named streams (lower case).
type fileKey struct {
	dev, ino uint64
	stream   string
}

// fileNode is a file with opens, shared by every connection: where the
// share modes, the pending delete and the byte-range locks of a file live.
// Its fields are guarded by fileTable.mu.
type fileNode struct {
	key           fileKey
	path          string
	isDir         bool
	opens         []*open
	deletePending bool
	// unlinked: its name went while it was open (a directory deleted while
	// others held it, a file another was renamed over); path is stale.
	unlinked bool
	locks    []byteLock
	waiters  []*lockWait
	// breakDone is closed when the oplock breaks under way end; levelII
	// counts the opens holding level II oplocks.
	breakDone chan struct{}
	levelII   int
	// streamMu serializes changes to a named stream's data.
	streamMu sync.Mutex
}

// fileTable is the server's files with opens.
type fileTable struct {
	srv    *Server
	mu     sync.Mutex
	nodes  map[fileKey]*fileNode
	leases map[leaseID]*lease
}

func (ft *fileTable) init(s *Server) {
	ft.srv = s
	ft.nodes = map[fileKey]*fileNode{}
	ft.leases = map[leaseID]*lease{}
}

// open is an open file (a FileId) of a connection.
type open struct {
	id      uint64
	conn    *conn
	tree    *tree
	node    *fileNode
	fd      int
	isDir   bool
	stream  string // a named stream's name, "" for the file's data
	quota   bool   // an open of the NTFS quota file (quota.go)
	access  uint32
	share   uint32
	options uint32
	// deleteOnClose: closing this open makes its file's delete pending.
	deleteOnClose bool
	// encrypted: it was opened by an encrypted request, so oplock breaks
	// to it go encrypted.
	encrypted bool
	// pid is the persistent half of the FileId, unique in the server (id
	// is the volatile half, unique in the connection); dur is set for a
	// durable or resilient open (see durable.go). conn and tree change,
	// under fileTable.mu, when the open is parked and reconnected.
	pid uint64
	dur *durableState
	// ask is the lease the open asked for, lease the one it holds (see
	// lease.go), guarded by fileTable.mu.
	ask   *leaseReq
	lease *lease

	// The oplock, guarded by fileTable.mu: its level, and while a break
	// is under way the level it breaks to and the timer that ends it.
	oplock     uint8
	breaking   bool
	breakTo    uint8
	breakTimer *time.Timer

	// io is held shared by reads and writes under way, and exclusively
	// to close fd.
	io     sync.RWMutex
	closed bool

	mu       sync.Mutex // the fields below
	scan     *dirScan
	position uint64
	notify   *notifyWatch
	wt       writeTime
}

// conflicts reports whether an open with access a and share s may not
// join the opens of n.
func (n *fileNode) conflicts(a, s uint32) bool {
	const data = accReadData | accWriteData | accAppendData | accExecute | accDelete
	if a&data == 0 {
		return false
	}
	for _, o := range n.opens {
		if o.access&data == 0 {
			continue
		}
		if a&(accReadData|accExecute) != 0 && o.share&shareRead == 0 ||
			a&(accWriteData|accAppendData) != 0 && o.share&shareWrite == 0 ||
			a&accDelete != 0 && o.share&shareDelete == 0 ||
			o.access&(accReadData|accExecute) != 0 && s&shareRead == 0 ||
			o.access&(accWriteData|accAppendData) != 0 && s&shareWrite == 0 ||
			o.access&accDelete != 0 && s&shareDelete == 0 {
			return true
		}
	}
	return false
}

// attach joins o to the file key at path, checking share modes and a
// pending delete, and grants it the oplock it can have of the one asked.
func (ft *fileTable) attach(o *open, key fileKey, path string, oplock uint8) uint32 {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	n := ft.nodes[key]
	if n == nil {
		n = &fileNode{key: key, path: path, isDir: o.isDir}
		ft.nodes[key] = n
	}
	if n.deletePending {
		ft.dropIfUnused(n)
		return wire.StatusDeletePending
	}
	if n.conflicts(o.access, o.share) {
		ft.dropIfUnused(n)
		return wire.StatusSharingViolation
	}
	n.opens = append(n.opens, o)
	o.node = n
	ft.grantOplock(n, o, oplock)
	n.countLevelII()
	return wire.StatusSuccess
}

func (ft *fileTable) dropIfUnused(n *fileNode) {
	if len(n.opens) == 0 {
		delete(ft.nodes, n.key)
	}
}

// openWith reports whether the file key has an open with any of access.
func (ft *fileTable) openWith(key fileKey, access uint32) bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if n := ft.nodes[key]; n != nil {
		for _, o := range n.opens {
			if o.access&access != 0 {
				return true
			}
		}
	}
	return false
}

// openBelow reports whether a file at or below dir other than by except
// is open.
func (ft *fileTable) openBelow(dir string, except *fileNode) bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for _, n := range ft.nodes {
		if n != except && len(n.opens) > 0 && (dir == "" || len(n.path) > len(dir) && n.path[:len(dir)] == dir && n.path[len(dir)] == '/') {
			return true
		}
	}
	return false
}

// Create dispositions and options.
const (
	fileSupersede   = 0
	fileOpen        = 1
	fileCreate      = 2
	fileOpenIf      = 3
	fileOverwrite   = 4
	fileOverwriteIf = 5

	optDirectory     uint32 = 0x00000001
	optWriteThrough  uint32 = 0x00000002
	optSequential    uint32 = 0x00000004
	optNoBuffering   uint32 = 0x00000008
	optSyncAlert     uint32 = 0x00000010
	optSyncNonAlert  uint32 = 0x00000020
	optNonDirectory  uint32 = 0x00000040
	optDeleteOnClose uint32 = 0x00001000
	optOpenByFileID  uint32 = 0x00002000
	optReparsePoint  uint32 = 0x00200000

	actionSuperseded  = 0
	actionOpened      = 1
	actionCreated     = 2
	actionOverwritten = 3
)

// File attributes.
const (
	attrReadonly   uint32 = 0x0001
	attrHidden     uint32 = 0x0002
	attrSystem     uint32 = 0x0004
	attrDirectory  uint32 = 0x0010
	attrArchive    uint32 = 0x0020
	attrNormal     uint32 = 0x0080
	attrTemporary  uint32 = 0x0100
	attrSparse     uint32 = 0x0200
	attrOffline    uint32 = 0x1000
	attrNotIndexed uint32 = 0x2000
	attrAllMask    uint32 = 0x7FB7
)

// createReq is a decoded CREATE request: its fixed part, then the name
// and the create contexts that part points to.
type createReq struct {
	createFixed
	name     []byte
	contexts []createContext
	// From the name (createPath): the named stream, and whether the
	// name said "::$DATA".
	stream     string
	dataStream bool
}

// createFixed is the fixed part of a CREATE request (MS-SMB2 2.2.13), in
// wire order, as binary.Decode reads it.
type createFixed struct {
	Size        uint16
	_           uint8 // SecurityFlags
	Oplock      uint8
	Impersonate uint32
	_           [16]byte // SmbCreateFlags, Reserved
	Access      uint32
	Attrs       uint32
	Share       uint32
	Disposition uint32
	Options     uint32
	NameOffset  uint16
	NameLength  uint16
	ContextsOff uint32
	ContextsLen uint32
}

// createContext is one create context of a request.
type createContext struct {
	name string
	data []byte
}

// parseCreate decodes the CREATE request msg (header and body).
func parseCreate(msg []byte) (createReq, uint32) {
	var q createReq
	if _, err := binary.Decode(msg[wire.HeaderSize:], binary.LittleEndian, &q.createFixed); err != nil || q.Size != 57 {
		return q, wire.StatusInvalidParameter
	}
	var err error
	if q.name, err = wire.Field(msg, uint32(q.NameOffset), uint32(q.NameLength), wire.HeaderSize+56); err != nil {
		return q, wire.StatusInvalidParameter
	}
	ctxs, err := wire.Field(msg, q.ContextsOff, q.ContextsLen, wire.HeaderSize+56)
	if err != nil {
		return q, wire.StatusInvalidParameter
	}
	le := binary.LittleEndian
	for len(ctxs) > 0 {
		if len(ctxs) < 16 {
			return q, wire.StatusInvalidParameter
		}
		next := le.Uint32(ctxs)
		nameOff, nameLen := int(le.Uint16(ctxs[4:])), int(le.Uint16(ctxs[6:]))
		dataOff, dataLen := int(le.Uint16(ctxs[10:])), int(le.Uint32(ctxs[12:]))
		end := len(ctxs)
		if next != 0 {
			if next%8 != 0 || int(next) > len(ctxs) {
				return q, wire.StatusInvalidParameter
			}
			end = int(next)
		}
		c := ctxs[:end]
		if nameLen == 0 || nameOff < 16 || nameOff+nameLen > len(c) || dataLen > 0 && (dataOff < 16 || dataOff+dataLen > len(c)) {
			return q, wire.StatusInvalidParameter
		}
		q.contexts = append(q.contexts, createContext{name: string(c[nameOff : nameOff+nameLen]), data: c[dataOff : dataOff+dataLen]})
		if next == 0 {
			break
		}
		ctxs = ctxs[next:]
	}
	if q.context(ctxDurableReconnect) != nil || q.context(ctxDurableReconnectV2) != nil {
		return q, wire.StatusSuccess // a reconnect ignores the other fields
	}
	if q.Impersonate > 3 {
		return q, wire.StatusBadImpersonationLevel
	}
	if q.Access&accInvalid != 0 {
		return q, wire.StatusAccessDenied
	}
	if q.Access&accSystemSecurity != 0 {
		return q, wire.StatusPrivilegeNotHeld
	}
	if q.Disposition > fileOverwriteIf || q.Share&^7 != 0 || q.Attrs&^attrAllMask != 0 ||
		q.Options&optDirectory != 0 && q.Options&optNonDirectory != 0 {
		return q, wire.StatusInvalidParameter
	}
	if q.Options&0xFF000000 != 0 {
		return q, wire.StatusInvalidParameter
	}
	// Tree connections, opens by file id and reserve-opfilter are not
	// offered.
	if q.Options&(0x80|optOpenByFileID|0x100000) != 0 {
		return q, wire.StatusNotSupported
	}
	return q, wire.StatusSuccess
}

func (q *createReq) context(name string) *createContext {
	for i := range q.contexts {
		if q.contexts[i].name == name {
			return &q.contexts[i]
		}
	}
	return nil
}

// create answers CREATE: it opens or creates a file or directory.
func (c *conn) create(r *request) uint32 {
	q, status := parseCreate(r.msg)
	if status != wire.StatusSuccess {
		return status
	}
	if r.tree.ipc {
		return wire.StatusObjectNameNotFound // no named pipes are served
	}
	if status := c.checkDurableContexts(&q); status != wire.StatusSuccess {
		return status
	}
	if q.context(ctxDurableReconnect) != nil || q.context(ctxDurableReconnectV2) != nil {
		return c.reconnect(r, &q)
	}
	c.mu.Lock()
	n := len(c.opens)
	c.mu.Unlock()
	if n >= maxOpens {
		return wire.StatusTooManyOpenedFiles
	}
	if isQuotaFile(q.name) {
		return c.openQuotaFile(r, &q)
	}
	path, status := c.createPath(&q)
	if status != wire.StatusSuccess {
		return status
	}
	if q.context("TWrp") != nil {
		return wire.StatusObjectNameNotFound // no snapshots
	}
	if x := q.context("SecD"); x != nil {
		if status := checkSD(x.data); status != wire.StatusSuccess {
			return status
		}
	}
	if x := q.context("ExtA"); x != nil {
		if !c.srv.root.streams {
			return wire.StatusEASNotSupported
		}
		if _, status := parseEAs(x.data); status != wire.StatusSuccess {
			return status
		}
	}
	if q.Options&optDeleteOnClose != 0 && mapGeneric(q.Access)&accDelete == 0 && q.Access&accMaximumAllowed == 0 {
		return wire.StatusInvalidParameter
	}
	if c.srv.files.leaseElsewhere(c.leaseAsk(&q), path) {
		return wire.StatusInvalidParameter // one lease key, one file
	}
	c.closeAppInstance(&q, path)
	// Oplocks and leases of others are broken first; the open waits for
	// their holders, answering later, when it can (the last of a chain).
	if wait := c.srv.breakFor(path, c.opener(&q)); wait != nil && r.chain.last {
		return c.createAfterBreak(r, wait)
	}
	return c.createNow(r, &q, path)
}

// createPath is the path q names beneath the root, each component
// spelled as the entry on disk it names (see fold).
func (c *conn) createPath(q *createReq) (string, uint32) {
	path, stream, data, status := parseName(q.name)
	if status != wire.StatusSuccess {
		return "", status
	}
	q.stream, q.dataStream = stream, data
	return c.srv.root.fold(path), wire.StatusSuccess
}

// createNow opens path, or its named stream, as q asks and appends the
// response.
func (c *conn) createNow(r *request, q *createReq, path string) uint32 {
	if q.stream != "" {
		return c.createStream(r, q, path)
	}
	o, st, action, status := c.openPath(r, q, path)
	if status != wire.StatusSuccess {
		return status
	}
	if x := q.context("ExtA"); x != nil && action != actionOpened {
		eas, _ := parseEAs(x.data) // checked by create
		setEAs(o.fd, eas)
	}
	if x := q.context("SecD"); x != nil && action == actionCreated && c.srv.root.streams {
		keepSD(o.fd, &st, x.data, ownerSecurity|groupSecurity|daclSecurity) // checked by create
	}
	c.appendCreateResponse(r, q, o, &st, action, append(c.makeDurable(r, q, o), c.leaseContext(o)...))
	r.chain.file = o
	return wire.StatusSuccess
}

// opener is what the open q asks for, as far as the breaks it needs go.
func (c *conn) opener(q *createReq) opener {
	return opener{access: mapGeneric(q.Access), share: q.Share, lease: c.leaseAsk(q), deleting: q.Options&optDeleteOnClose != 0, stream: strings.ToLower(q.stream),
		overwrite: q.Disposition == fileOverwrite || q.Disposition == fileOverwriteIf || q.Disposition == fileSupersede}
}

// createAfterBreak answers r later, once the oplock breaks it waits for
// have ended, and those that their ends show are needed then (a lease
// broken to what an earlier open needed may have to go further), or it
// is cancelled.
func (c *conn) createAfterBreak(r *request, wait <-chan struct{}) uint32 {
	r2 := r.detach()
	q, _ := parseCreate(r2.msg)
	path, _ := c.createPath(&q)
	return c.answerAfterBreaks(r, wait, func() <-chan struct{} {
		w := c.opener(&q)
		w.retry = true
		return c.srv.breakFor(path, w)
	}, r2, func() uint32 { return c.createNow(r2, &q, path) })
}

// openPath opens or creates path as q asks and registers the open.
func (c *conn) openPath(r *request, q *createReq, path string) (*open, fileStat, uint32, uint32) {
	root := c.srv.root
	// A symbolic link is followed while it stays beneath the root, but is
	// itself what an open acts on when the client asks for that (open
	// reparse point), when it asks to delete or rename without touching
	// data, and when the link leads nowhere in the share (missing, out,
	// or a loop): such links can be listed, renamed and deleted.
	flags := unix.O_PATH
	if q.Options&optReparsePoint != 0 || mapGeneric(q.Access)&accDelete != 0 && mapGeneric(q.Access)&linkDenied == 0 {
		flags |= unix.O_NOFOLLOW
	}
	for attempt := 0; ; attempt++ {
		fd0, err := root.open(path, flags, 0)
		if err == unix.ENOENT || err == unix.EXDEV || err == unix.ELOOP {
			if fd, err2 := root.open(path, unix.O_PATH|unix.O_NOFOLLOW, 0); err2 == nil {
				fd0, err = fd, nil
			}
		}
		if err == nil {
			st, err := fstat(fd0)
			if err != nil {
				unix.Close(fd0)
				return nil, st, 0, ntStatus(err)
			}
			o, action, status := c.openExisting(r, q, path, fd0, &st)
			unix.Close(fd0)
			if status == wire.StatusSuccess {
				st, _ = fstat(o.fd)
			}
			return o, st, action, status
		}
		if err != unix.ENOENT {
			return nil, fileStat{}, 0, ntStatus(err)
		}
		switch q.Disposition {
		case fileOpen, fileOverwrite:
			return nil, fileStat{}, 0, c.missing(path)
		}
		o, st, status := c.createNew(r, q, path)
		if status == wire.StatusObjectNameCollision && q.Disposition != fileCreate && attempt == 0 {
			continue // created by someone else meanwhile: open it
		}
		return o, st, actionCreated, status
	}
}

// missing is the status for a path that does not exist: its name, or a
// directory on the way.
func (c *conn) missing(path string) uint32 {
	dir, _ := splitPath(path)
	fd, err := c.srv.root.openDir(dir)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return wire.StatusObjectPathNotFound
		}
		return ntStatus(err)
	}
	unix.Close(fd)
	return wire.StatusObjectNameNotFound
}

// maxAccess is what the server may do to the file fd0 (O_PATH) holds.
func maxAccess(fd0 int, st *fileStat) uint32 {
	a := fileAllAccess
	p := procPath(fd0)
	if unix.Faccessat(unix.AT_FDCWD, p, unix.R_OK, 0) != nil {
		a &^= accReadData | accReadEA | accExecute
	}
	if st.isDir() {
		if unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, 0) != nil {
			a &^= accWriteData | accAppendData | accDeleteChild
		}
		return a
	}
	if st.mode&0200 == 0 || unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, 0) != nil {
		a &^= accWriteData | accAppendData | accWriteEA
	}
	return a
}

// grant is the access an open gets: what was asked (all that may be had
// for MAXIMUM_ALLOWED), or ok false when something asked may not be had.
func grant(asked, max uint32) (uint32, bool) {
	want := mapGeneric(asked &^ accMaximumAllowed)
	if want&^max != 0 {
		return 0, false
	}
	if asked&accMaximumAllowed != 0 {
		want |= max
	}
	return want, true
}

func (c *conn) openExisting(r *request, q *createReq, path string, fd0 int, st *fileStat) (*open, uint32, uint32) {
	link := st.mode&unix.S_IFMT == unix.S_IFLNK
	if !st.isDir() && !st.isReg() && !link {
		return nil, 0, wire.StatusAccessDenied // devices, pipes and sockets are not served
	}
	action := uint32(actionOpened)
	switch q.Disposition {
	case fileCreate:
		return nil, 0, wire.StatusObjectNameCollision
	case fileOverwrite, fileOverwriteIf:
		action = actionOverwritten
	case fileSupersede:
		action = actionSuperseded
	}
	if st.isDir() {
		if q.dataStream && q.Options&optDirectory != 0 {
			return nil, 0, wire.StatusNotADirectory
		}
		if q.Options&optNonDirectory != 0 || q.dataStream {
			return nil, 0, wire.StatusFileIsADirectory
		}
		if action != actionOpened {
			return nil, 0, wire.StatusInvalidParameter
		}
	} else if q.Options&optDirectory != 0 && !link {
		return nil, 0, wire.StatusNotADirectory
	}
	max := maxAccess(fd0, st)
	if link {
		// Neither the link's data nor its attributes: it may only be
		// looked at, renamed and deleted.
		max = fileAllAccess &^ (linkDenied | accWriteAttr | accWriteEA | accWriteDAC | accWriteOwner)
	}
	access, ok := grant(q.Access, max)
	if !ok {
		return nil, 0, wire.StatusAccessDenied
	}
	if action != actionOpened && max&accWriteData == 0 {
		return nil, 0, wire.StatusAccessDenied
	}
	if q.Options&optDeleteOnClose != 0 && !st.isDir() && st.mode&0200 == 0 {
		return nil, 0, wire.StatusCannotDelete
	}
	o := &open{conn: c, tree: r.tree, isDir: st.isDir(), access: access, share: q.Share, options: q.Options, fd: -1, encrypted: r.encrypted, ask: c.leaseAsk(q)}
	o.deleteOnClose = q.Options&optDeleteOnClose != 0
	flags := unix.O_RDONLY
	switch {
	case o.isDir:
		flags |= unix.O_DIRECTORY
	case access&(accWriteData|accAppendData) != 0 || action != actionOpened:
		flags = unix.O_RDWR
		if access&(accReadData|accExecute) == 0 && max&accReadData == 0 {
			flags = unix.O_WRONLY
		}
	case access&(accReadData|accExecute) == 0 || link:
		flags = -1 // only attributes: keep an O_PATH descriptor
	}
	var err error
	if flags == -1 {
		o.fd, err = unix.Dup(fd0)
	} else if o.fd, err = reopen(fd0, flags); err != nil && o.isDir {
		o.fd, err = unix.Dup(fd0) // a directory that cannot be listed
	}
	if err != nil {
		return nil, 0, ntStatus(err)
	}
	if status := c.srv.files.attach(o, st.key(), path, q.Oplock); status != wire.StatusSuccess {
		unix.Close(o.fd)
		return nil, 0, status
	}
	if action != actionOpened {
		if err := unix.Ftruncate(o.fd, 0); err != nil {
			c.srv.release(o)
			return nil, 0, ntStatus(err)
		}
		dropStreams(o.fd)
		preallocate(o, q)
		c.srv.notifyChange(path, notifyModified, false)
	}
	c.addOpen(o)
	return o, action, wire.StatusSuccess
}

// linkDenied is the access to data no open of a symbolic link itself has.
const linkDenied = accReadData | accWriteData | accAppendData | accExecute

// createNew creates path as a file or, with optDirectory, a directory.
func (c *conn) createNew(r *request, q *createReq, path string) (*open, fileStat, uint32) {
	root := c.srv.root
	if q.Options&optDeleteOnClose != 0 && q.Attrs&attrReadonly != 0 && q.Options&optDirectory == 0 {
		return nil, fileStat{}, wire.StatusCannotDelete // as an existing read-only file
	}
	access, _ := grant(q.Access, fileAllAccess)
	o := &open{conn: c, tree: r.tree, access: access, share: q.Share, options: q.Options, fd: -1, encrypted: r.encrypted, ask: c.leaseAsk(q)}
	o.deleteOnClose = q.Options&optDeleteOnClose != 0
	var err error
	if q.Options&optDirectory != 0 {
		if q.Disposition != fileCreate && q.Disposition != fileOpenIf {
			return nil, fileStat{}, wire.StatusInvalidParameter
		}
		dir, base := splitPath(path)
		dfd, err := root.openDir(dir)
		if err != nil {
			return nil, fileStat{}, c.missing(path)
		}
		err = unix.Mkdirat(dfd, base, 0777)
		if err == nil {
			o.fd, err = root.open(path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		}
		unix.Close(dfd)
		o.isDir = true
	} else {
		o.fd, err = root.open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0666)
		if err == nil && q.Attrs&attrReadonly != 0 {
			if st, err := fstat(o.fd); err == nil {
				unix.Fchmod(o.fd, st.mode&0777&^0222)
			}
		}
	}
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return nil, fileStat{}, wire.StatusObjectPathNotFound
		}
		return nil, fileStat{}, ntStatus(err)
	}
	preallocate(o, q)
	// Attributes beyond the default ones are kept for the client.
	if a := q.Attrs & attrStored &^ (attrReadonly | attrSparse); a&^attrArchive != 0 || o.isDir && a != 0 {
		if !o.isDir {
			a |= attrArchive
		}
		writeDos(o.fd, a, 0)
	}
	st, err := fstat(o.fd)
	if err != nil {
		unix.Close(o.fd)
		return nil, fileStat{}, ntStatus(err)
	}
	if status := c.srv.files.attach(o, st.key(), path, q.Oplock); status != wire.StatusSuccess {
		unix.Close(o.fd)
		return nil, fileStat{}, status
	}
	c.addOpen(o)
	c.srv.notifyChange(path, notifyAdded, o.isDir)
	return o, st, wire.StatusSuccess
}

// preallocate gives a new or overwritten file the space its CREATE's
// allocation size context asks for (the file's size stays 0).
func preallocate(o *open, q *createReq) {
	if al := q.context("AlSi"); al != nil && len(al.data) >= 8 && !o.isDir {
		if n := int64(binary.LittleEndian.Uint64(al.data)); n > 0 && n <= maxFileSize {
			unix.Fallocate(o.fd, unix.FALLOC_FL_KEEP_SIZE, 0, n)
		}
	}
}

func (c *conn) addOpen(o *open) {
	if o.pid == 0 {
		o.pid = c.srv.nextPersistent.Add(1)
	}
	c.mu.Lock()
	c.nextFile++
	o.id = c.nextFile
	c.opens[o.id] = o
	c.mu.Unlock()
}

// appendCreateResponse appends the CREATE response body for o, with the
// create contexts q asks for and extra ones (name and data each).
func (c *conn) appendCreateResponse(r *request, q *createReq, o *open, st *fileStat, action uint32, extra [][2][]byte) {
	le := binary.LittleEndian
	b := r.out
	b = le.AppendUint16(b, 89)
	c.srv.files.mu.Lock()
	oplock := o.oplock
	c.srv.files.mu.Unlock()
	b = append(b, oplock, 0)
	b = le.AppendUint32(b, action)
	b = appendTimes(b, st)
	b = le.AppendUint64(b, uint64(st.alloc))
	b = le.AppendUint64(b, uint64(st.size))
	b = le.AppendUint32(b, c.attrs(o.node.path, st))
	b = le.AppendUint32(b, 0)
	b = appendFileID(b, o)
	ctxAt := len(b)
	b = le.AppendUint64(b, 0)
	ctxs := extra
	if q.context("MxAc") != nil {
		v := le.AppendUint32(nil, 0)
		ctxs = append(ctxs, [2][]byte{[]byte("MxAc"), le.AppendUint32(v, maxOf(o))})
	}
	if q.context("QFid") != nil {
		v := le.AppendUint64(nil, st.ino)
		v = le.AppendUint64(v, st.dev)
		ctxs = append(ctxs, [2][]byte{[]byte("QFid"), append(v, make([]byte, 16)...)})
	}
	if len(ctxs) == 0 {
		r.out = append(b, 0)
		return
	}
	start := len(b)
	for i, cx := range ctxs {
		at := len(b)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint16(b, 16)
		b = le.AppendUint16(b, uint16(len(cx[0])))
		b = le.AppendUint16(b, 0)
		b = le.AppendUint16(b, 24)
		b = le.AppendUint32(b, uint32(len(cx[1])))
		b = append(b, cx[0]...)
		for len(b)-at < 24 {
			b = append(b, 0)
		}
		b = append(b, cx[1]...)
		if i < len(ctxs)-1 {
			for (len(b)-at)%8 != 0 {
				b = append(b, 0)
			}
			le.PutUint32(b[at:], uint32(len(b)-at))
		}
	}
	le.PutUint32(b[ctxAt:], uint32(start-r.hdr))
	le.PutUint32(b[ctxAt+4:], uint32(len(b)-start))
	r.out = b
}

// maxOf is the most o's file allows, for the maximal access context.
func maxOf(o *open) uint32 {
	if o.quota {
		return accGenericRead
	}
	st, err := fstat(o.fd)
	if err != nil {
		return 0
	}
	return maxAccess(o.fd, &st)
}

// appendTimes appends creation, last access, last write and change times.
func appendTimes(b []byte, st *fileStat) []byte {
	le := binary.LittleEndian
	// The change time is the last write's, as Samba has it: Linux's own
	// cannot be set, and clients that set one expect it back.
	for _, t := range []uint64{st.btime, st.atime, st.mtime, st.mtime} {
		b = le.AppendUint64(b, t)
	}
	return b
}

func appendFileID(b []byte, o *open) []byte {
	b = binary.LittleEndian.AppendUint64(b, o.pid)
	return binary.LittleEndian.AppendUint64(b, o.id)
}

// attrs are the DOS attributes of the file at path with metadata st:
// directory from its type, read-only from the owner's write bit (of a
// file), the others as a client set them, or by default archive for a
// file and hidden for a name starting with a dot.
func (c *conn) attrs(path string, st *fileStat) uint32 {
	var a uint32
	if st.hasDos {
		a = st.dosAttrs & attrStored
		if !st.isDir() {
			a &^= attrReadonly // the mode's
		}
	} else {
		if !st.isDir() {
			a = attrArchive
		}
		if _, base := splitPath(path); len(base) > 1 && base[0] == '.' && base != ".." {
			a |= attrHidden
		}
	}
	if st.isDir() {
		a |= attrDirectory
	} else if st.mode&0200 == 0 {
		a |= attrReadonly
	}
	if a == 0 {
		a = attrNormal
	}
	return a
}

// attrStored are the attributes kept in the dosXattr: all a client may
// set but directory, and read-only of a file (the mode holds that).
const attrStored = attrHidden | attrSystem | attrArchive | attrTemporary | attrSparse | attrOffline | attrNotIndexed | attrReadonly

// fileOf24 checks a FLUSH or CLOSE request (StructureSize 24, the file id
// at offset 8) and resolves its file.
func (c *conn) fileOf24(r *request) (*open, uint32) {
	b := r.body
	if len(b) < 24 || binary.LittleEndian.Uint16(b) != 24 {
		return nil, wire.StatusInvalidParameter
	}
	return c.fileFor(r, b[8:24])
}

// fileFor resolves the FileId at fid for r: an open of r's tree, or, in a
// related compound, the file of the request before.
func (c *conn) fileFor(r *request, fid []byte) (*open, uint32) {
	le := binary.LittleEndian
	p, v := le.Uint64(fid), le.Uint64(fid[8:])
	if p == ^uint64(0) && v == ^uint64(0) && r.h.Flags&wire.FlagRelated != 0 {
		if f := r.chain.prevFile; f != nil {
			r.chain.file = f
			return f, wire.StatusSuccess
		}
		if r.chain.status != wire.StatusSuccess {
			return nil, r.chain.status
		}
		return nil, wire.StatusFileClosed
	}
	c.mu.Lock()
	o := c.opens[v]
	c.mu.Unlock()
	if o == nil || o.pid != p || o.tree != r.tree {
		return nil, wire.StatusFileClosed
	}
	r.chain.file = o
	return o, wire.StatusSuccess
}

// closeRequest answers CLOSE.
func (c *conn) closeRequest(r *request) uint32 {
	o, status := c.fileOf24(r)
	if status != wire.StatusSuccess {
		return status
	}
	flags := binary.LittleEndian.Uint16(r.body[2:])
	var st fileStat
	var attrs uint32
	if flags&1 != 0 {
		o.closeWriteTime() // what the response tells

		if s, err := fstat(o.fd); err == nil {
			st, attrs = s, c.attrs(o.node.path, &s)
		}
	}
	if !c.closeOpen(o) {
		return wire.StatusFileClosed
	}
	le := binary.LittleEndian
	out := le.AppendUint16(r.out, 60)
	out = le.AppendUint16(out, flags&1)
	out = le.AppendUint32(out, 0)
	if flags&1 != 0 {
		out = appendTimes(out, &st)
		out = le.AppendUint64(out, uint64(st.alloc))
		out = le.AppendUint64(out, uint64(st.size))
	} else {
		out = append(out, make([]byte, 48)...)
	}
	r.out = le.AppendUint32(out, attrs)
	return wire.StatusSuccess
}

// closeOpen closes o once: its pending notifications end, its locks go,
// and when it is the last open of a file whose delete is pending, the
// file is deleted. It reports whether o was still open.
func (c *conn) closeOpen(o *open) bool {
	c.mu.Lock()
	if c.opens[o.id] != o {
		c.mu.Unlock()
		return false
	}
	delete(c.opens, o.id)
	c.mu.Unlock()
	o.mu.Lock()
	w := o.notify
	o.notify = nil
	o.mu.Unlock()
	if w != nil {
		w.cleanup()
	}
	o.closeWriteTime()
	o.io.Lock()
	o.closed = true
	o.io.Unlock()
	c.srv.release(o)
	return true
}

// release detaches o from its file, deleting the file if o was the last
// open of a file whose delete is pending, and closes its descriptor.
func (s *Server) release(o *open) {
	ft := &s.files
	ft.mu.Lock()
	n := o.node
	var del bool
	var path string
	var waits []*lockWait
	if n != nil {
		for i, x := range n.opens {
			if x == o {
				n.opens = append(n.opens[:i], n.opens[i+1:]...)
				break
			}
		}
		if o.breaking {
			o.breaking = false
			o.breakTimer.Stop()
		}
		ft.dropLease(o)
		n.breaksDone()
		n.countLevelII()
		if o.deleteOnClose {
			n.deletePending = true
		}
		waits = n.dropLocks(o)
		if len(n.opens) == 0 {
			del, path = n.deletePending && !n.unlinked, n.path
			delete(ft.nodes, n.key)
		}
	}
	// A directory whose delete is pending while others hold it open (a
	// client watching it) goes as soon as none of them could cancel the
	// delete (none has DELETE access), as on a local disk, so that its
	// name can be made again at once; the watches are told.
	watched := n != nil && n.isDir && n.deletePending && len(n.opens) > 0
	early := watched && !n.unlinked
	for i := 0; early && i < len(n.opens); i++ {
		early = n.opens[i].access&accDelete == 0
	}
	if early {
		path = n.path
	}
	ft.mu.Unlock()
	if early && s.root.remove(path, n.key, true) == nil {
		ft.mu.Lock()
		n.unlinked = true
		ft.mu.Unlock()
		s.notifyChange(path, notifyRemoved, true)
	}
	if watched {
		s.dirGone(n, "")
	}
	for _, w := range waits {
		w.op.complete(wire.StatusRangeNotLocked, nil)
	}
	if n != nil {
		ft.wake(n)
	}
	switch {
	case del && n.key.stream != "":
		s.root.removeStream(path, n.key)
	case del:
		s.root.remove(path, n.key, n.isDir)
		s.notifyChange(path, notifyRemoved, n.isDir)
	}
	unix.Close(o.fd)
}

// remove deletes path if it still names the file key.
func (r *rootFS) remove(path string, key fileKey, dir bool) error {
	d, base := splitPath(path)
	dfd, err := r.openDir(d)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	st, err := lstatAt(dfd, base)
	if err != nil {
		return err
	}
	if st.key() != key && st.mode&unix.S_IFMT == unix.S_IFLNK {
		// Opened through the link: the link is what goes, not the file
		// it leads to.
		if to, err := r.statPath(path); err == nil && to.key() == key {
			return unix.Unlinkat(dfd, base, 0)
		}
	}
	if st.key() != key {
		return unix.ENOENT
	}
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return unix.Unlinkat(dfd, base, flags)
}
