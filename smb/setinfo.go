//go:build linux

package smb

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

func (c *conn) setInfo(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
	typ, class := b[2], b[3]
	buf, err := wire.Field(r.msg, uint32(le.Uint16(b[8:])), le.Uint32(b[4:]), wire.HeaderSize+32)
	if err != nil {
		return wire.StatusInvalidParameter
	}
	o, status := c.fileFor(r, b[16:32])
	if status != wire.StatusSuccess {
		return status
	}
	// A rename waits until the other leases' holders have let go of the
	// handles they cache; it answers later, when it can (the last of a
	// chain).
	if typ == infoFile && class == fileRenameInformation && o.stream == "" {
		if wait := c.srv.breakHandleCaching(o); wait != nil && r.chain.last {
			return c.setInfoAfterBreak(r, o, wait)
		}
	}
	return c.setInfoOf(r, o, buf)
}

// setInfoOf sets what r asks of o, buf being the information r carries.
func (c *conn) setInfoOf(r *request, o *open, buf []byte) uint32 {
	b := r.body
	le := binary.LittleEndian
	typ, class := b[2], b[3]
	addl := le.Uint32(b[12:])
	var status uint32
	switch typ {
	case infoFile:
		status = c.setFileInfo(r, o, class, buf)
	case infoSecurity:
		// The parts set are kept (see sd.go); where the file system keeps
		// no user xattrs, a descriptor is accepted and changes nothing.
		if addl&(ownerSecurity|groupSecurity) != 0 && o.access&accWriteOwner == 0 || addl&daclSecurity != 0 && o.access&accWriteDAC == 0 {
			return wire.StatusAccessDenied
		}
		if status = checkSD(buf); status != wire.StatusSuccess {
			return status
		}
		if parts := addl & (ownerSecurity | groupSecurity | daclSecurity); parts != 0 && c.srv.root.streams {
			st, err := fstat(o.fd)
			if err != nil {
				return ntStatus(err)
			}
			status = keepSD(o.fd, &st, buf, parts)
		}
	case infoFilesystem, infoQuota:
		return wire.StatusNotSupported
	default:
		return wire.StatusInvalidParameter
	}
	if status == wire.StatusSuccess {
		r.out = le.AppendUint16(r.out, 2)
	}
	return status
}

// setInfoAfterBreak answers r, a rename of o, later: once the lease
// breaks it waits for have ended, and those that their ends show are
// needed then, or it is cancelled.
func (c *conn) setInfoAfterBreak(r *request, o *open, wait <-chan struct{}) uint32 {
	r2 := r.detach()
	return c.answerAfterBreaks(r, wait, func() <-chan struct{} { return c.srv.breakHandleCaching(o) }, r2, func() uint32 {
		c.mu.Lock()
		live := c.opens[o.id] == o
		c.mu.Unlock()
		if !live {
			return wire.StatusFileClosed // closed while it waited
		}
		b := r2.body
		buf, _ := wire.Field(r2.msg, uint32(binary.LittleEndian.Uint16(b[8:])), binary.LittleEndian.Uint32(b[4:]), wire.HeaderSize+32) // checked by setInfo
		return c.setInfoOf(r2, o, buf)
	})
}

// setFileInfo sets one file information class.
func (c *conn) setFileInfo(r *request, o *open, class uint8, buf []byte) uint32 {
	le := binary.LittleEndian
	need := map[uint8]int{
		fileBasicInformation: 36, fileRenameInformation: 20, fileLinkInformation: 20,
		fileDispositionInformation: 1, filePositionInformation: 8, fileModeInformation: 4,
		fileAllocationInformation: 8, fileEndOfFileInformation: 8, fileDispositionInformationEx: 4,
		fileFullEaInformation: 0,
	}
	n, known := need[class]
	if !known {
		return wire.StatusInvalidInfoClass
	}
	if len(buf) < n {
		return wire.StatusInfoLengthMismatch
	}
	switch class {
	case fileBasicInformation:
		return c.setBasic(o, buf)
	case fileRenameInformation, fileLinkInformation:
		return c.rename(r, o, buf, class == fileLinkInformation)
	case fileDispositionInformation:
		return c.setDelete(o, buf[0] != 0)
	case fileDispositionInformationEx:
		return c.setDelete(o, le.Uint32(buf)&1 != 0)
	case filePositionInformation:
		o.mu.Lock()
		o.position = le.Uint64(buf)
		o.mu.Unlock()
		return wire.StatusSuccess
	case fileModeInformation:
		if le.Uint32(buf)&^(optWriteThrough|optSequential|optSyncAlert|optSyncNonAlert) != 0 {
			return wire.StatusInvalidParameter
		}
		return wire.StatusSuccess
	case fileAllocationInformation, fileEndOfFileInformation:
		if o.isDir {
			return wire.StatusInvalidParameter
		}
		if o.access&(accWriteData|accAppendData) == 0 {
			return wire.StatusAccessDenied
		}
		size := le.Uint64(buf)
		if size > 1<<62 {
			return wire.StatusInvalidParameter
		}
		// Setting either size ends others' read caching, as a write does
		// (MS-FSA 2.1.5.14.3, 2.1.5.14.4).
		c.srv.files.breakLevelII(o)
		if o.stream != "" {
			if class == fileAllocationInformation {
				return wire.StatusSuccess
			}
			return c.setStreamSize(o, size)
		}
		if class == fileAllocationInformation {
			// Only shrinking below the end of file changes anything.
			st, err := fstat(o.fd)
			if err != nil {
				return ntStatus(err)
			}
			if int64(size) >= st.size {
				return wire.StatusSuccess
			}
		}
		o.io.RLock()
		err := unix.Ftruncate(o.fd, int64(size))
		o.io.RUnlock()
		if err != nil {
			return ntStatus(err)
		}
		c.moveWriteTime(o)
		o.afterWrite()
		c.srv.notifyFiltered(o.node.path, notifyModified, false, filterSize)
		return wire.StatusSuccess
	case fileFullEaInformation:
		if o.access&accWriteEA == 0 {
			return wire.StatusAccessDenied
		}
		if !c.srv.root.streams {
			return wire.StatusEASNotSupported
		}
		eas, status := parseEAs(buf)
		if status != wire.StatusSuccess {
			return status
		}
		return setEAs(o.fd, eas)
	}
	return wire.StatusInvalidInfoClass
}

// setBasic sets times and attributes: a time of 0 or -1 is left as it is;
// the change time follows the last write time and is not set on its own;
// the creation time and the attributes other than read-only (of a file:
// the owner's write bit) are kept in the dosXattr.
func (c *conn) setBasic(o *open, buf []byte) uint32 {
	le := binary.LittleEndian
	if o.access&accWriteAttr == 0 {
		return wire.StatusAccessDenied
	}
	crtime, atime, mtime := le.Uint64(buf), le.Uint64(buf[8:]), le.Uint64(buf[16:])
	attrs := le.Uint32(buf[32:])
	if attrs&attrDirectory != 0 && !o.isDir || attrs&^attrAllMask != 0 || o.isDir && attrs&attrTemporary != 0 {
		return wire.StatusInvalidParameter
	}
	given := func(ft uint64) bool { return ft != 0 && ft != ^uint64(0) && ft != ^uint64(1) }
	if !o.isDir {
		c.moveWriteTime(o) // any set, as on Windows, moves a pending one
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if given(atime) {
		sec, nsec := wire.FiletimeUnix(atime)
		ts[0] = unix.Timespec{Sec: sec, Nsec: nsec}
	}
	if given(mtime) {
		sec, nsec := wire.FiletimeUnix(mtime)
		ts[1] = unix.Timespec{Sec: sec, Nsec: nsec}
	}
	p := procPath(o.fd)
	if ts[0].Nsec != unix.UTIME_OMIT || ts[1].Nsec != unix.UTIME_OMIT {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			return ntStatus(err)
		}
	}
	if !o.isDir {
		o.stickWriteTime(mtime)
	}
	st, err := fstat(o.fd)
	if err != nil {
		return ntStatus(err)
	}
	if attrs != 0 && !o.isDir {
		mode := st.mode & 07777
		if attrs&attrReadonly != 0 {
			mode &^= 0222
		} else if mode&0200 == 0 {
			mode |= 0200
		}
		if mode != st.mode&07777 {
			if err := unix.Fchmodat(unix.AT_FDCWD, p, mode, 0); err != nil {
				return ntStatus(err)
			}
		}
	}
	if given(crtime) || attrs != 0 {
		keep := c.attrs(o.node.path, &st) & attrStored
		if attrs != 0 {
			keep = attrs & attrStored
		}
		var ct uint64
		if st.hasDos || given(crtime) {
			ct = st.btime
		}
		if given(crtime) {
			ct = crtime
		}
		writeDos(o.fd, keep, ct)
	}
	c.srv.notifyFiltered(o.node.path, notifyModified, o.isDir, filterAttributes|filterLastWrite)
	return wire.StatusSuccess
}

// setDelete sets or clears the pending delete of o's file.
func (c *conn) setDelete(o *open, del bool) uint32 {
	if o.access&accDelete == 0 {
		return wire.StatusAccessDenied
	}
	if del {
		st, err := fstat(o.fd)
		if err != nil {
			return ntStatus(err)
		}
		if !o.isDir && st.mode&0200 == 0 {
			return wire.StatusCannotDelete
		}
		if o.isDir {
			if o.node.path == "" {
				return wire.StatusAccessDenied
			}
			if empty, err := dirEmpty(o.fd); err != nil {
				return ntStatus(err)
			} else if !empty {
				return wire.StatusDirectoryNotEmpty
			}
		}
	}
	ft := &c.srv.files
	ft.mu.Lock()
	o.node.deletePending = del
	ft.mu.Unlock()
	return wire.StatusSuccess
}

// dirEmpty reports whether the directory fd has no entries but . and ..
func dirEmpty(fd int) (bool, error) {
	dfd, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(dfd, buf)
		if err != nil {
			return false, err
		}
		if n == 0 {
			return true, nil
		}
		if _, c, _ := unix.ParseDirent(buf[:n], 1, nil); c > 0 {
			return false, nil
		}
	}
}

// rename renames o's file (or links it, with link) to the path buf names.
func (c *conn) rename(r *request, o *open, buf []byte, link bool) uint32 {
	le := binary.LittleEndian
	replace := buf[0] != 0
	n := le.Uint32(buf[16:])
	if uint64(n) > uint64(len(buf)-20) || le.Uint64(buf[8:]) != 0 {
		return wire.StatusInvalidParameter
	}
	raw := buf[20 : 20+n]
	name, err := wire.DecodeUTF16(raw)
	if err != nil || name == "" {
		return wire.StatusObjectNameInvalid
	}
	if o.stream != "" || name[0] == ':' {
		return c.renameStream(o, name, replace)
	}
	if name[0] == '\\' {
		name = name[1:]
	}
	target, status := cleanPath(name)
	if status != wire.StatusSuccess {
		return status
	}
	if !link && o.access&accDelete == 0 {
		return wire.StatusAccessDenied
	}
	ft := &c.srv.files
	ft.mu.Lock()
	src, unlinked := o.node.path, o.node.unlinked
	ft.mu.Unlock()
	if src == "" || unlinked {
		return wire.StatusAccessDenied
	}
	if target == src {
		if link {
			return wire.StatusObjectNameCollision
		}
		return wire.StatusSuccess
	}
	if !link && o.isDir && ft.openBelow(src, o.node) {
		return wire.StatusAccessDenied
	}
	root := c.srv.root
	sdir, sbase := splitPath(src)
	ddir, dbase := splitPath(target)
	ddir = root.fold(ddir)
	sfd, err := root.openDir(sdir)
	if err != nil {
		return ntStatus(err)
	}
	defer unix.Close(sfd)
	dfd, err := root.openDir(ddir)
	if err != nil {
		return wire.StatusObjectPathNotFound
	}
	defer unix.Close(dfd)
	// The target names an entry case-insensitively: a case variant of the
	// file's own name only changes its case; another file's is the file
	// replaced (or the collision).
	if on := entryNamed(dfd, dbase); on != "" {
		switch {
		case ddir != sdir || on != sbase:
			dbase = on
		case link:
			return wire.StatusObjectNameCollision
		case on == dbase:
			return wire.StatusSuccess
		}
	}
	if ddir == "" {
		target = dbase
	} else {
		target = ddir + "/" + dbase
	}
	// As on Windows and Samba: the directory renamed into must not be
	// open with delete access.
	if dst, err := fstat(dfd); err == nil && ft.openWith(dst.key(), accDelete) {
		return wire.StatusSharingViolation
	}
	// A file open elsewhere is replaced as on a local disk, where an
	// editor saves by renaming over the file another program has open:
	// its opens keep the old file, nameless, and lose their oplocks and
	// leases. Not when one of them refuses deletion (no FILE_SHARE_DELETE),
	// where Windows refuses it too. A file whose delete is pending (a
	// client that renames by delete and rename, as libsmbclient does, while
	// another has the file open) is replaced even without replace-if-exists.
	// A hard link never replaces an open file.
	var replaced *fileNode
	if existing, err := lstatAt(dfd, dbase); err == nil {
		ft.mu.Lock()
		if existing.key() != o.node.key {
			replaced = ft.nodes[existing.key()]
		}
		pending := replaced != nil && replaced.deletePending
		refused := replaced != nil && replaced.conflicts(accDelete, shareRead|shareWrite|shareDelete)
		ft.mu.Unlock()
		switch {
		case !replace && !pending:
			return wire.StatusObjectNameCollision
		case existing.isDir(), refused, link && replaced != nil:
			return wire.StatusAccessDenied
		}
		replace = true
		if replaced != nil {
			c.srv.breakFor(target, opener{access: accDelete, share: shareRead | shareWrite | shareDelete, overwrite: true})
		}
	}
	if link {
		if o.isDir {
			return wire.StatusFileIsADirectory
		}
		if replace {
			unix.Unlinkat(dfd, dbase, 0)
		}
		if err := unix.Linkat(sfd, sbase, dfd, dbase, 0); err != nil {
			return ntStatus(err)
		}
		c.srv.notifyChange(target, notifyAdded, false)
		return wire.StatusSuccess
	}
	flags := uint(unix.RENAME_NOREPLACE)
	if replace {
		flags = 0
	}
	if err := unix.Renameat2(sfd, sbase, dfd, dbase, flags); err != nil {
		return ntStatus(err)
	}
	ft.mu.Lock()
	o.node.path = target
	if replaced != nil {
		replaced.unlinked = true
	}
	ft.mu.Unlock()
	if sdir == ddir {
		c.srv.notifyChange(src, notifyRenamedOld, o.isDir)
		c.srv.notifyChange(target, notifyRenamedNew, o.isDir)
	} else {
		c.srv.notifyChange(src, notifyRemoved, o.isDir)
		c.srv.notifyChange(target, notifyAdded, o.isDir)
	}
	if !o.isDir {
		// As on Windows, where a renamed file gets the archive attribute.
		c.srv.notifyFiltered(target, notifyModified, false, filterAttributes|notNamed)
	}
	return wire.StatusSuccess
}
