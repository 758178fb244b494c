//go:build linux

package smb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// rootFS is the share's root directory. Every path is resolved beneath it
// by openat2 with RESOLVE_BENEATH: a ".." or a symbolic link that leads
// out, or an absolute link, fails with EXDEV; magic links of /proc are
// not followed either. Paths are relative, '/'-separated, and "" is the
// root itself.
type rootFS struct {
	fd int
	// streams: the file system keeps user xattrs, so named streams can
	// be kept (stream.go).
	streams bool
}

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

func openRoot(dir string) (*rootFS, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the directory to serve: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	_, err = unix.Getxattr(procPath(fd), dosXattr, nil)
	r := &rootFS{fd: fd, streams: err != unix.ENOTSUP}
	probe, err := r.open("", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("this kernel cannot resolve paths safely beneath a directory (openat2 with RESOLVE_BENEATH, Linux 5.6 and later): %w", err)
	}
	defer unix.Close(probe)
	if _, err := reopen(probe, unix.O_RDONLY|unix.O_DIRECTORY); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("reopening files needs /proc/self/fd: %w", err)
	}
	return r, nil
}

// open opens path beneath the root.
func (r *rootFS) open(path string, flags int, mode uint32) (int, error) {
	if path == "" {
		path = "."
	}
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // openat2 refuses it with O_PATH
	}
	how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags}
	for {
		fd, err := unix.Openat2(r.fd, path, &how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

// openDir opens the directory path beneath the root, for *at calls.
func (r *rootFS) openDir(path string) (int, error) {
	return r.open(path, unix.O_PATH|unix.O_DIRECTORY, 0)
}

// reopen opens the file fd refers to afresh with flags (fd may be an
// O_PATH descriptor): the very same inode, whatever its name is now.
func reopen(fd int, flags int) (int, error) {
	for {
		nfd, err := unix.Open(procPath(fd), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return nfd, err
	}
}

func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// splitPath is the parent directory and the last name of a path.
func splitPath(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// fileStat is what the server needs of a file's metadata.
type fileStat struct {
	mode   uint32 // type and permission bits, as st_mode
	size   int64
	alloc  int64 // bytes allocated
	ino    uint64
	dev    uint64
	nlink  uint32
	atime  uint64 // FILETIMEs
	mtime  uint64
	ctime  uint64
	btime  uint64 // creation: as a client set it, the file system's, or mtime
	uid    uint32
	gid    uint32
	exists bool
	// From the dosXattr, when the file has one: the DOS attributes the
	// mode cannot hold.
	hasDos   bool
	dosAttrs uint32
}

func (s *fileStat) isDir() bool { return s.mode&unix.S_IFMT == unix.S_IFDIR }
func (s *fileStat) isReg() bool { return s.mode&unix.S_IFMT == unix.S_IFREG }
func (s *fileStat) key() fileKey {
	return fileKey{dev: s.dev, ino: s.ino}
}

const statxMask = unix.STATX_BASIC_STATS | unix.STATX_BTIME

func fromStatx(x *unix.Statx_t) fileStat {
	ns := func(t unix.StatxTimestamp) uint64 { return wire.UnixFiletime(t.Sec, int64(t.Nsec)) }
	s := fileStat{
		mode:   uint32(x.Mode),
		size:   int64(x.Size),
		alloc:  int64(x.Blocks) * 512,
		ino:    x.Ino,
		dev:    unix.Mkdev(x.Dev_major, x.Dev_minor),
		nlink:  x.Nlink,
		atime:  ns(x.Atime),
		mtime:  ns(x.Mtime),
		ctime:  ns(x.Ctime),
		uid:    x.Uid,
		gid:    x.Gid,
		exists: true,
	}
	if s.isDir() {
		s.size, s.alloc = 0, 0 // a directory has no data, as on NTFS
	}
	s.btime = s.mtime
	if x.Mask&unix.STATX_BTIME != 0 {
		s.btime = ns(x.Btime)
	}
	return s
}

// fstat is the metadata of the open file fd, with its DOS attributes and
// creation time when it keeps them.
func fstat(fd int) (fileStat, error) {
	var x unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, statxMask, &x); err != nil {
		return fileStat{}, err
	}
	s := fromStatx(&x)
	if s.isDir() || s.isReg() {
		s.readDos(fd)
	}
	return s, nil
}

// lstatAt is the metadata of name in the directory dirfd, not following
// a symbolic link.
func lstatAt(dirfd int, name string) (fileStat, error) {
	var x unix.Statx_t
	if err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, statxMask, &x); err != nil {
		return fileStat{}, err
	}
	return fromStatx(&x), nil
}

// entryStat is lstatAt with the DOS attributes of a file or directory.
func entryStat(dirfd int, name string) (fileStat, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fileStat{}, err
	}
	defer unix.Close(fd)
	return fstat(fd)
}

// dosXattr keeps what Windows clients set and Linux has no place for: the
// DOS attributes beyond read-only and directory (hidden, system, archive,
// sparse...) and the creation time. Its value is a version byte (1), the
// attributes (4 bytes) and the creation time as a FILETIME (8 bytes, 0 for
// the file system's own), little-endian. Where the file system keeps no
// user xattrs, those settings are not kept.
const (
	dosXattr   = "user.plug.dos"
	dosVersion = 1
	dosSize    = 13
)

// readDos fills in what fd's dosXattr holds. fd is a file or directory,
// never a symbolic link (the xattr call would follow it).
func (s *fileStat) readDos(fd int) {
	var b [dosSize]byte
	n, err := unix.Getxattr(procPath(fd), dosXattr, b[:])
	if err != nil || n != dosSize || b[0] != dosVersion {
		return
	}
	s.hasDos = true
	s.dosAttrs = binary.LittleEndian.Uint32(b[1:])
	if ct := binary.LittleEndian.Uint64(b[5:]); ct != 0 {
		s.btime = ct
	}
}

// writeDos stores DOS attributes and a creation time (a FILETIME, 0 for
// the file system's own) on fd. User xattrs need write permission, which a
// read-only file lacks even for its owner: it gets it for the moment.
func writeDos(fd int, attrs uint32, crtime uint64) error {
	b := make([]byte, dosSize)
	b[0] = dosVersion
	binary.LittleEndian.PutUint32(b[1:], attrs)
	binary.LittleEndian.PutUint64(b[5:], crtime)
	return setXattrForce(fd, dosXattr, b)
}

// setXattrForce sets the user xattr name of fd to value, giving a
// read-only file write permission for the moment where that is what
// stands in the way.
func setXattrForce(fd int, name string, value []byte) error {
	p := procPath(fd)
	err := unix.Setxattr(p, name, value, 0)
	if err != unix.EACCES {
		return err
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&0200 != 0 {
		return err
	}
	if unix.Fchmodat(unix.AT_FDCWD, p, st.Mode&07777|0200, 0) != nil {
		return err
	}
	err = unix.Setxattr(p, name, value, 0)
	unix.Fchmodat(unix.AT_FDCWD, p, st.Mode&07777, 0)
	return err
}

// statPath is the metadata of path beneath the root, a symbolic link
// followed while it stays beneath.
func (r *rootFS) statPath(path string) (fileStat, error) {
	fd, err := r.open(path, unix.O_PATH, 0)
	if err != nil {
		return fileStat{}, err
	}
	defer unix.Close(fd)
	return fstat(fd)
}

// ntStatus maps an error of the file system to the status a client gets.
func ntStatus(err error) uint32 {
	var errno unix.Errno
	if errors.As(err, &errno) {
		if status, ok := ntStatuses[errno]; ok {
			return status
		}
	}
	return wire.StatusUnsuccessful
}

// ntStatuses are the statuses of the errnos that have one of their own.
var ntStatuses = map[unix.Errno]uint32{
	unix.ENOENT:       wire.StatusObjectNameNotFound,
	unix.ENOTDIR:      wire.StatusObjectPathNotFound,
	unix.EEXIST:       wire.StatusObjectNameCollision,
	unix.EACCES:       wire.StatusAccessDenied,
	unix.EPERM:        wire.StatusAccessDenied,
	unix.EXDEV:        wire.StatusAccessDenied,
	unix.ELOOP:        wire.StatusAccessDenied,
	unix.ENOTEMPTY:    wire.StatusDirectoryNotEmpty,
	unix.ENOSPC:       wire.StatusDiskFull,
	unix.EDQUOT:       wire.StatusDiskFull,
	unix.EFBIG:        wire.StatusFileTooLarge,
	unix.EISDIR:       wire.StatusFileIsADirectory,
	unix.ENAMETOOLONG: wire.StatusObjectNameInvalid,
	unix.EROFS:        wire.StatusMediaWriteProtected,
	unix.EMFILE:       wire.StatusTooManyOpenedFiles,
	unix.ENFILE:       wire.StatusTooManyOpenedFiles,
	unix.EINVAL:       wire.StatusInvalidParameter,
	unix.EBUSY:        wire.StatusSharingViolation,
	unix.ETXTBSY:      wire.StatusSharingViolation,
	unix.ENOMEM:       wire.StatusNoMemory,
}
