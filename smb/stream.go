//go:build linux

package smb

import (
	"encoding/binary"
	"strings"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Alternate data streams ("file:name" or "file:name:$DATA") live in user
// extended attributes of their file, one attribute per stream, named
// streamXattr followed by the stream's name as first created; its value is
// the stream's data. Stream names are case-insensitive like file names.
// A stream holds at most what the file system lets one xattr value hold
// (64 KiB on Linux, one block on ext4); a write past that answers
// STATUS_DISK_FULL. Where the file system keeps no user xattrs, creating a
// stream answers STATUS_NOT_SUPPORTED and the share does not announce
// named streams. Streams go with their file (rename, delete) and are
// dropped when the file is overwritten or superseded.
const (
	streamXattr  = "user.plug.stream."
	maxStream    = 64 << 10
	maxXattrName = 255 // XATTR_NAME_MAX
)

// splitStream splits the stream part off a path a client names: base is
// the file's path, stream the stream's name ("" for the file's data) and
// data whether the name said "::$DATA" explicitly. A stream name may not
// hold '/', '\', ':' or NUL, nor be longer than an xattr name leaves room
// for, and its type can only be $DATA.
func splitStream(name string) (base, stream string, data bool, status uint32) {
	i := strings.IndexByte(name, ':')
	if i < 0 {
		return name, "", false, wire.StatusSuccess
	}
	base, rest := name[:i], name[i+1:]
	stream, typ, typed := strings.Cut(rest, ":")
	if typed && !strings.EqualFold(typ, "$DATA") || !typed && stream == "" ||
		strings.ContainsAny(stream, "/\\:\x00") || len(stream) > maxXattrName-len(streamXattr) {
		return "", "", false, wire.StatusObjectNameInvalid
	}
	return base, stream, stream == "", wire.StatusSuccess
}

// xattrNames is the names of the xattrs of the file fd.
func xattrNames(fd int) []string {
	p := procPath(fd)
	size, err := unix.Listxattr(p, nil)
	if err != nil || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	if size, err = unix.Listxattr(p, buf); err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(buf[:size]), "\x00"), "\x00")
}

// streamsOf is the names of the streams of the file fd (as the xattrs
// spell them, without streamXattr).
func streamsOf(fd int) []string {
	var names []string
	for _, n := range xattrNames(fd) {
		if s, ok := strings.CutPrefix(n, streamXattr); ok && s != "" {
			names = append(names, s)
		}
	}
	return names
}

// streamNamed is the stream of fd that name names case-insensitively (the
// exact spelling first), "" when there is none.
func streamNamed(fd int, name string) string {
	found := ""
	for _, s := range streamsOf(fd) {
		if s == name {
			return s
		}
		if found == "" && strings.EqualFold(s, name) {
			found = s
		}
	}
	return found
}

// readStream is the data of stream of the file fd.
func readStream(fd int, stream string) ([]byte, error) {
	buf := make([]byte, maxStream)
	n, err := unix.Getxattr(procPath(fd), streamXattr+stream, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// writeStream sets the data of stream of the file fd (see writeDos for a
// read-only file's write permission).
func writeStream(fd int, stream string, data []byte) error {
	if len(data) > maxStream {
		return unix.ENOSPC
	}
	err := unix.Setxattr(procPath(fd), streamXattr+stream, data, 0)
	if err == unix.E2BIG || err == unix.ERANGE {
		err = unix.ENOSPC
	}
	return err
}

// dropStreams removes every stream of the file fd.
func dropStreams(fd int) {
	for _, s := range streamsOf(fd) {
		unix.Removexattr(procPath(fd), streamXattr+s)
	}
}

// createStream answers a CREATE of a named stream of the file path: the
// file is created empty when the disposition allows and it is missing.
func (c *conn) createStream(r *request, q *createReq, path string) uint32 {
	if q.Options&optDirectory != 0 {
		return wire.StatusNotADirectory
	}
	root := c.srv.root
	fd0, err := root.open(path, unix.O_PATH, 0)
	if err == unix.ENOENT {
		if q.Disposition == fileOpen || q.Disposition == fileOverwrite {
			return c.missing(path)
		}
		fd, cerr := root.open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0666)
		if cerr != nil && cerr != unix.EEXIST {
			return c.missingOr(path, cerr)
		}
		if cerr == nil {
			unix.Close(fd)
			c.srv.notifyChange(path, notifyAdded, false)
		}
		fd0, err = root.open(path, unix.O_PATH, 0)
	}
	if err != nil {
		return ntStatus(err)
	}
	defer unix.Close(fd0)
	st, err := fstat(fd0)
	if err != nil {
		return ntStatus(err)
	}
	if !st.isDir() && !st.isReg() {
		return wire.StatusAccessDenied
	}
	if c.srv.files.deletePending(st.key()) {
		return wire.StatusDeletePending
	}
	max := maxAccess(fd0, &st)
	access, ok := grant(q.Access, max)
	if !ok {
		return wire.StatusAccessDenied
	}
	name := streamNamed(fd0, q.stream)
	action := uint32(actionOpened)
	switch {
	case name == "" && (q.Disposition == fileOpen || q.Disposition == fileOverwrite):
		return wire.StatusObjectNameNotFound
	case name != "" && q.Disposition == fileCreate:
		return wire.StatusObjectNameCollision
	case name == "":
		action = actionCreated
	case q.Disposition == fileOverwrite || q.Disposition == fileOverwriteIf:
		action = actionOverwritten
	case q.Disposition == fileSupersede:
		action = actionSuperseded
	}
	if action != actionOpened && max&accWriteData == 0 {
		return wire.StatusAccessDenied
	}
	if name == "" {
		name = q.stream
	}
	o := &open{conn: c, tree: r.tree, access: access, share: q.Share, options: q.Options, stream: name, encrypted: r.encrypted, ask: c.leaseAsk(q)}
	o.deleteOnClose = q.Options&optDeleteOnClose != 0
	if o.fd, err = unix.Dup(fd0); err != nil {
		return ntStatus(err)
	}
	key := st.key()
	key.stream = strings.ToLower(name)
	if status := c.srv.files.attach(o, key, path, q.Oplock); status != wire.StatusSuccess {
		unix.Close(o.fd)
		return status
	}
	if action != actionOpened {
		if err := writeStream(o.fd, name, nil); err != nil {
			c.srv.release(o)
			if err == unix.ENOTSUP {
				return wire.StatusNotSupported
			}
			return ntStatus(err)
		}
	}
	c.addOpen(o)
	c.streamStat(o, &st)
	c.appendCreateResponse(r, q, o, &st, action, c.leaseContext(o)) // a stream's open is not durable
	r.chain.file = o
	return wire.StatusSuccess
}

// missingOr is the status of err, an error creating path: a directory on
// the way that is missing is STATUS_OBJECT_PATH_NOT_FOUND.
func (c *conn) missingOr(path string, err error) uint32 {
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return wire.StatusObjectPathNotFound
	}
	return ntStatus(err)
}

// streamStat makes st, the stat of a stream open's file, that of the
// stream: its size.
func (c *conn) streamStat(o *open, st *fileStat) {
	data, _ := readStream(o.fd, o.stream)
	st.size = int64(len(data))
	st.alloc = (st.size + 4095) &^ 4095
}

// readStreamAt reads into p from off of a stream open's data; n is 0 at
// its end.
func readStreamAt(o *open, p []byte, off uint64) (int, error) {
	data, err := readStream(o.fd, o.stream)
	if err != nil || off >= uint64(len(data)) {
		return 0, err
	}
	return copy(p, data[off:]), nil
}

// writeStreamAt writes p at off of a stream open's data (off ^0: at its
// end).
func (c *conn) writeStreamAt(o *open, p []byte, off uint64) uint32 {
	o.node.streamMu.Lock()
	defer o.node.streamMu.Unlock()
	data, err := readStream(o.fd, o.stream)
	if err != nil {
		return ntStatus(err)
	}
	if off == ^uint64(0) {
		off = uint64(len(data))
	}
	if off+uint64(len(p)) > maxStream {
		return wire.StatusDiskFull
	}
	if end := int(off) + len(p); end > len(data) {
		data = append(data, make([]byte, end-len(data))...)
	}
	copy(data[off:], p)
	if err := writeStream(o.fd, o.stream, data); err != nil {
		return ntStatus(err)
	}
	c.srv.notifyChange(o.node.path, notifyModified, false)
	return wire.StatusSuccess
}

// setStreamSize sets the size of a stream open's data.
func (c *conn) setStreamSize(o *open, size uint64) uint32 {
	if size > maxStream {
		return wire.StatusDiskFull
	}
	o.node.streamMu.Lock()
	defer o.node.streamMu.Unlock()
	data, err := readStream(o.fd, o.stream)
	if err != nil {
		return ntStatus(err)
	}
	if int(size) <= len(data) {
		data = data[:size]
	} else {
		data = append(data, make([]byte, int(size)-len(data))...)
	}
	return ntStatus0(writeStream(o.fd, o.stream, data))
}

// copyStream copies n bytes at soff of src to doff of dst, either of them
// a named stream (whose data is at most maxStream bytes).
func (c *conn) copyStream(src *open, soff int64, dst *open, doff int64, n int) uint32 {
	if n > maxStream {
		return wire.StatusDiskFull
	}
	buf := make([]byte, n)
	var err error
	if src.stream != "" {
		_, err = readStreamAt(src, buf, uint64(soff))
	} else {
		_, err = fullIO(unix.Pread, src.fd, buf, soff)
	}
	if err != nil {
		return ntStatus(err)
	}
	if dst.stream != "" {
		return c.writeStreamAt(dst, buf, uint64(doff))
	}
	_, err = fullIO(unix.Pwrite, dst.fd, buf, doff)
	return ntStatus0(err)
}

// streamSuffix is what follows the file's name in the name of the open o:
// ":" and its stream's name, or nothing.
func streamSuffix(o *open) string {
	if o.stream == "" {
		return ""
	}
	return ":" + o.stream
}

// ntStatus0 is ntStatus that maps no error to success.
func ntStatus0(err error) uint32 {
	if err == nil {
		return wire.StatusSuccess
	}
	return ntStatus(err)
}

// renameStream renames the stream o has open to name (":new[:$DATA]");
// an existing stream of that name is replaced only when replace is set
// and it is empty, as NTFS does. Renaming to the file's data ("::$DATA")
// moves the stream's data into an empty file.
func (c *conn) renameStream(o *open, name string, replace bool) uint32 {
	if o.stream == "" || !strings.HasPrefix(name, ":") {
		if o.stream != "" {
			return wire.StatusSharingViolation
		}
		return wire.StatusInvalidParameter
	}
	_, to, _, status := splitStream(name)
	if status != wire.StatusSuccess {
		return status
	}
	if o.access&accDelete == 0 {
		return wire.StatusAccessDenied
	}
	o.node.streamMu.Lock()
	defer o.node.streamMu.Unlock()
	data, err := readStream(o.fd, o.stream)
	if err != nil {
		return ntStatus(err)
	}
	p := procPath(o.fd)
	if to == "" {
		st, err := fstat(o.fd)
		if err != nil {
			return ntStatus(err)
		}
		if st.size != 0 && !replace {
			return wire.StatusObjectNameCollision
		}
		fd, err := reopen(o.fd, unix.O_WRONLY|unix.O_TRUNC)
		if err != nil {
			return ntStatus(err)
		}
		_, err = fullIO(unix.Pwrite, fd, data, 0)
		unix.Close(fd)
		if err != nil {
			return ntStatus(err)
		}
		unix.Removexattr(p, streamXattr+o.stream)
		return wire.StatusSuccess
	}
	if on := streamNamed(o.fd, to); on != "" && !strings.EqualFold(on, o.stream) {
		if !replace {
			return wire.StatusObjectNameCollision
		}
		if other, _ := readStream(o.fd, on); len(other) > 0 {
			return wire.StatusInvalidParameter
		}
		unix.Removexattr(p, streamXattr+on)
	}
	if err := writeStream(o.fd, to, data); err != nil {
		return ntStatus(err)
	}
	if to != o.stream {
		unix.Removexattr(p, streamXattr+o.stream)
	}
	ft := &c.srv.files
	ft.mu.Lock()
	o.stream = to
	ft.mu.Unlock()
	return wire.StatusSuccess
}

// appendStreamInfo appends FileStreamInformation for the file fd: its
// data (a file's, not a directory's) and each named stream.
func appendStreamInfo(b []byte, fd int, st *fileStat) []byte {
	type entry struct {
		name        string
		size, alloc int64
	}
	var es []entry
	if !st.isDir() {
		es = append(es, entry{"::$DATA", st.size, st.alloc})
	}
	for _, s := range streamsOf(fd) {
		data, err := readStream(fd, s)
		if err != nil {
			continue
		}
		n := int64(len(data))
		es = append(es, entry{":" + s + ":$DATA", n, (n + 4095) &^ 4095})
	}
	le := binary.LittleEndian
	prev := -1
	start := len(b)
	for _, e := range es {
		at := wire.Align8(len(b) - start)
		for len(b)-start < at {
			b = append(b, 0)
		}
		if prev >= 0 {
			le.PutUint32(b[start+prev:], uint32(at-prev))
		}
		prev = at
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, uint32(wire.UTF16Len(e.name)))
		b = le.AppendUint64(b, uint64(e.size))
		b = le.AppendUint64(b, uint64(e.alloc))
		b = wire.AppendUTF16(b, e.name)
	}
	return b
}

// deletePending reports whether the file key (its data, not a stream)
// has its delete pending.
func (ft *fileTable) deletePending(key fileKey) bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	n := ft.nodes[key]
	return n != nil && n.deletePending
}

// removeStream removes the stream of key's file at path, if path still
// names that file.
func (r *rootFS) removeStream(path string, key fileKey) error {
	fd, err := r.open(path, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	st, err := fstat(fd)
	if err != nil {
		return err
	}
	if st.dev != key.dev || st.ino != key.ino {
		return unix.ENOENT
	}
	if s := streamNamed(fd, key.stream); s != "" {
		return unix.Removexattr(procPath(fd), streamXattr+s)
	}
	return unix.ENOENT
}
