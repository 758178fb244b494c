//go:build linux

package smb

import (
	"strings"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// quotaFileName is NTFS's quota file, which Windows opens to read and set
// a volume's quotas, and which Windows and Samba answer opens of on every
// share. The share keeps no quotas (FileFsControlInformation says so), so
// an open of it is answered as theirs are, a hidden system directory
// without times, for reading only; it has no data to read, is not
// listed or watched as a directory, and answers quota queries as every
// open does (STATUS_NOT_SUPPORTED).
const quotaFileName = `$Extend\$Quota:$Q:$INDEX_ALLOCATION`

// quotaKey is the quota file's node in the file table: the root's inode
// with a stream name no named stream can have.
func quotaKey(rootSt *fileStat) fileKey {
	return fileKey{dev: rootSt.dev, ino: rootSt.ino, stream: ":$q:$index_allocation"}
}

// isQuotaFile reports whether the CREATE name raw (UTF-16) names the
// quota file, in any case.
func isQuotaFile(raw []byte) bool {
	name, err := wire.DecodeUTF16(raw)
	return err == nil && strings.EqualFold(name, quotaFileName)
}

// quotaStat is what the quota file answers for itself: the root's inode,
// no times, hidden, system, archive and directory.
func quotaStat(rootSt *fileStat) fileStat {
	return fileStat{mode: unix.S_IFDIR, ino: rootSt.ino, dev: rootSt.dev, nlink: 1, exists: true,
		hasDos: true, dosAttrs: attrHidden | attrSystem | attrArchive}
}

// openQuotaFile answers a CREATE of the quota file: it opens as an
// existing file, for reading only.
func (c *conn) openQuotaFile(r *request, q *createReq) uint32 {
	switch {
	case q.Disposition == fileCreate:
		return wire.StatusObjectNameCollision
	case q.Disposition != fileOpen && q.Disposition != fileOpenIf:
		return wire.StatusAccessDenied
	case q.Options&optNonDirectory != 0:
		return wire.StatusFileIsADirectory
	}
	access, ok := grant(q.Access, accGenericRead)
	if !ok {
		return wire.StatusAccessDenied
	}
	fd, err := c.srv.root.open("", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return ntStatus(err)
	}
	rootSt, err := fstat(fd)
	if err != nil {
		unix.Close(fd)
		return ntStatus(err)
	}
	// Not a directory open: it is not listed or watched.
	o := &open{conn: c, tree: r.tree, access: access, share: q.Share, options: q.Options, fd: fd, encrypted: r.encrypted, quota: true}
	if status := c.srv.files.attach(o, quotaKey(&rootSt), "", 0); status != wire.StatusSuccess {
		unix.Close(fd)
		return status
	}
	c.addOpen(o)
	st := quotaStat(&rootSt)
	c.appendCreateResponse(r, q, o, &st, actionOpened, nil)
	r.chain.file = o
	return wire.StatusSuccess
}
