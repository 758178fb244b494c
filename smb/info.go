//go:build linux

package smb

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Info types and the classes of QUERY_INFO and SET_INFO (MS-FSCC 2.4, 2.5).
const (
	infoFile       = 1
	infoFilesystem = 2
	infoSecurity   = 3
	infoQuota      = 4

	fileBasicInformation          = 4
	fileStandardInformation       = 5
	fileInternalInformation       = 6
	fileEaInformation             = 7
	fileAccessInformation         = 8
	fileNameInformation           = 9
	fileRenameInformation         = 10
	fileLinkInformation           = 11
	fileDispositionInformation    = 13
	filePositionInformation       = 14
	fileFullEaInformation         = 15
	fileModeInformation           = 16
	fileAlignmentInformation      = 17
	fileAllInformation            = 18
	fileAllocationInformation     = 19
	fileEndOfFileInformation      = 20
	fileAlternateNameInformation  = 21
	fileStreamInformation         = 22
	fileCompressionInformation    = 28
	fileNetworkOpenInformation    = 34
	fileAttributeTagInformation   = 35
	fileNormalizedNameInformation = 48
	fileIDInformation             = 59
	fileDispositionInformationEx  = 64

	fsVolumeInformation     = 1
	fsSizeInformation       = 3
	fsDeviceInformation     = 4
	fsAttributeInformation  = 5
	fsControlInformation    = 6
	fsFullSizeInformation   = 7
	fsObjectIDInformation   = 8
	fsSectorSizeInformation = 11
)

func (c *conn) queryInfo(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
	typ, class := b[2], b[3]
	limit := le.Uint32(b[4:])
	addl := le.Uint32(b[16:])
	if _, err := wire.Field(r.msg, uint32(le.Uint16(b[8:])), le.Uint32(b[12:]), wire.HeaderSize+40); err != nil {
		return wire.StatusInvalidParameter
	}
	if limit > c.maxSize() || !c.chargeOK(r, limit) {
		return wire.StatusInvalidParameter
	}
	o, status := c.fileFor(r, b[24:40])
	if status != wire.StatusSuccess {
		return status
	}
	st, err := fstat(o.fd)
	if err != nil {
		return ntStatus(err)
	}
	if o.stream != "" {
		c.streamStat(o, &st)
	}
	if o.quota {
		st = quotaStat(&st)
	}
	var out []byte
	var fixed int
	switch typ {
	case infoFile:
		out, fixed, status = c.fileInformation(o, &st, class)
	case infoFilesystem:
		out, fixed, status = c.fsInformation(o, class)
	case infoSecurity:
		if o.access&accReadControl == 0 {
			return wire.StatusAccessDenied
		}
		out = fileSecurity(o.fd, &st, addl)
		if uint32(len(out)) > limit {
			r.out = appendErrorBody(r.out, le.AppendUint32(nil, uint32(len(out))))
			return wire.StatusBufferTooSmall
		}
	case infoQuota:
		return wire.StatusNotSupported
	default:
		return wire.StatusInvalidParameter
	}
	if status != wire.StatusSuccess {
		return status
	}
	if int(limit) < fixed {
		return wire.StatusInfoLengthMismatch
	}
	if uint32(len(out)) > limit {
		out = out[:limit]
		status = wire.StatusBufferOverflow
	}
	r.out = le.AppendUint16(r.out, 9)
	r.out = le.AppendUint16(r.out, wire.HeaderSize+8)
	r.out = le.AppendUint32(r.out, uint32(len(out)))
	r.out = append(r.out, out...)
	if len(out) == 0 {
		r.out = append(r.out, 0)
	}
	return status
}

// fileInformation is the file information class of o, and the size of
// its fixed part.
func (c *conn) fileInformation(o *open, st *fileStat, class uint8) ([]byte, int, uint32) {
	le := binary.LittleEndian
	needAttr := func() bool { return o.access&accReadAttr != 0 }
	attrs := c.attrs(o.node.path, st)
	o.mu.Lock()
	pos := o.position
	o.mu.Unlock()
	var b []byte
	switch class {
	case fileBasicInformation:
		if !needAttr() {
			return nil, 0, wire.StatusAccessDenied
		}
		return appendBasic(nil, st, attrs), 40, wire.StatusSuccess
	case fileStandardInformation:
		return c.appendStandard(nil, o, st), 24, wire.StatusSuccess
	case fileInternalInformation:
		return le.AppendUint64(nil, st.ino), 8, wire.StatusSuccess
	case fileEaInformation:
		return le.AppendUint32(nil, eaSize(easOf(o.fd))), 4, wire.StatusSuccess
	case fileAccessInformation:
		return le.AppendUint32(nil, o.access), 4, wire.StatusSuccess
	case filePositionInformation:
		return le.AppendUint64(nil, pos), 8, wire.StatusSuccess
	case fileModeInformation:
		return le.AppendUint32(nil, o.options&(optWriteThrough|optSequential|optNoBuffering|optSyncAlert|optSyncNonAlert|optDeleteOnClose)), 4, wire.StatusSuccess
	case fileAlignmentInformation:
		return le.AppendUint32(nil, 0), 4, wire.StatusSuccess
	case fileNameInformation, fileNormalizedNameInformation:
		if class == fileNormalizedNameInformation && c.dialect < wire.Dialect311 {
			return nil, 0, wire.StatusNotSupported // as Windows: 3.1.1 only
		}
		name := wirePath(o.node.path) + streamSuffix(o)
		if class == fileNameInformation {
			name = `\` + name
		}
		b = le.AppendUint32(nil, uint32(wire.UTF16Len(name)))
		return wire.AppendUTF16(b, name), 4, wire.StatusSuccess
	case fileAllInformation:
		// Unlike Windows, a handle that may append may also read this:
		// libsmbclient opens to append without FILE_READ_ATTRIBUTES and
		// asks it for the end of the file, failing the open otherwise.
		if !needAttr() && o.access&accAppendData == 0 {
			return nil, 0, wire.StatusAccessDenied
		}
		b = appendBasic(nil, st, attrs)
		b = c.appendStandard(b, o, st)
		b = le.AppendUint64(b, st.ino)
		b = le.AppendUint32(b, eaSize(easOf(o.fd)))
		b = le.AppendUint32(b, o.access)
		b = le.AppendUint64(b, pos)
		b = le.AppendUint32(b, o.options&(optWriteThrough|optSequential|optNoBuffering|optSyncAlert|optSyncNonAlert|optDeleteOnClose))
		b = le.AppendUint32(b, 0)
		name := `\` + wirePath(o.node.path) + streamSuffix(o)
		b = le.AppendUint32(b, uint32(wire.UTF16Len(name)))
		return wire.AppendUTF16(b, name), 104, wire.StatusSuccess
	case fileAlternateNameInformation:
		_, base := splitPath(o.node.path)
		short := shortName(base)
		if base == "" {
			return nil, 0, wire.StatusObjectNameNotFound // the share's root
		}
		b = le.AppendUint32(nil, uint32(wire.UTF16Len(short)))
		return wire.AppendUTF16(b, short), 8, wire.StatusSuccess // as Windows: no less than 8
	case fileStreamInformation:
		fst, err := fstat(o.fd) // the file's own size, not a stream's
		if err != nil {
			return nil, 0, ntStatus(err)
		}
		return appendStreamInfo(nil, o.fd, &fst), 32, wire.StatusSuccess
	case fileCompressionInformation:
		b = le.AppendUint64(nil, uint64(st.size))
		return append(b, make([]byte, 8)...), 16, wire.StatusSuccess
	case fileNetworkOpenInformation:
		if !needAttr() {
			return nil, 0, wire.StatusAccessDenied
		}
		b = appendTimes(nil, st)
		b = le.AppendUint64(b, uint64(st.alloc))
		b = le.AppendUint64(b, uint64(st.size))
		b = le.AppendUint32(b, attrs)
		return le.AppendUint32(b, 0), 56, wire.StatusSuccess
	case fileAttributeTagInformation:
		if !needAttr() {
			return nil, 0, wire.StatusAccessDenied
		}
		return le.AppendUint32(le.AppendUint32(nil, attrs), 0), 8, wire.StatusSuccess
	case fileIDInformation:
		b = le.AppendUint64(nil, st.dev)
		b = le.AppendUint64(b, st.ino)
		return le.AppendUint64(b, 0), 24, wire.StatusSuccess
	case fileFullEaInformation:
		if o.access&accReadEA == 0 {
			return nil, 0, wire.StatusAccessDenied
		}
		eas := easOf(o.fd)
		if len(eas) == 0 {
			return nil, 0, wire.StatusNoEASOnFile
		}
		return appendEAs(nil, eas), 0, wire.StatusSuccess
	}
	return nil, 0, wire.StatusInvalidInfoClass
}

func appendBasic(b []byte, st *fileStat, attrs uint32) []byte {
	b = appendTimes(b, st)
	b = binary.LittleEndian.AppendUint32(b, attrs)
	return binary.LittleEndian.AppendUint32(b, 0)
}

func (c *conn) appendStandard(b []byte, o *open, st *fileStat) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(st.alloc))
	b = le.AppendUint64(b, uint64(st.size))
	b = le.AppendUint32(b, st.nlink)
	c.srv.files.mu.Lock()
	pending := o.node.deletePending
	c.srv.files.mu.Unlock()
	b = append(b, boolByte(pending), boolByte(o.isDir), 0, 0)
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// fsInformation is the file system information class of the share.
func (c *conn) fsInformation(o *open, class uint8) ([]byte, int, uint32) {
	le := binary.LittleEndian
	var fs unix.Statfs_t
	if err := unix.Fstatfs(o.fd, &fs); err != nil {
		return nil, 0, ntStatus(err)
	}
	const sector = 512
	bsize := uint64(fs.Bsize)
	if bsize < sector {
		bsize = sector
	}
	perUnit := uint32(bsize / sector)
	rootSt, _ := c.srv.root.statPath("")
	var b []byte
	switch class {
	case fsVolumeInformation:
		label := c.srv.cfg.Share
		b = le.AppendUint64(nil, rootSt.btime)
		b = le.AppendUint32(b, uint32(rootSt.dev))
		b = le.AppendUint32(b, uint32(wire.UTF16Len(label)))
		b = append(b, 0, 0)
		return wire.AppendUTF16(b, label), 24, wire.StatusSuccess
	case fsSizeInformation:
		b = le.AppendUint64(nil, fs.Blocks)
		b = le.AppendUint64(b, fs.Bavail)
		b = le.AppendUint32(b, perUnit)
		return le.AppendUint32(b, sector), 24, wire.StatusSuccess
	case fsFullSizeInformation:
		b = le.AppendUint64(nil, fs.Blocks)
		b = le.AppendUint64(b, fs.Bavail)
		b = le.AppendUint64(b, fs.Bfree)
		b = le.AppendUint32(b, perUnit)
		return le.AppendUint32(b, sector), 32, wire.StatusSuccess
	case fsDeviceInformation:
		b = le.AppendUint32(nil, 7) // FILE_DEVICE_DISK
		return le.AppendUint32(b, 0x20), 8, wire.StatusSuccess
	case fsAttributeInformation:
		// Case-sensitive search, case-preserved and Unicode names, sparse
		// files, and named streams where they can be kept.
		flags := uint32(0x1 | 0x2 | 0x4 | 0x40)
		if c.srv.root.streams {
			flags |= 0x40000
		}
		b = le.AppendUint32(nil, flags)
		b = le.AppendUint32(b, 255)
		b = le.AppendUint32(b, uint32(wire.UTF16Len("NTFS")))
		return wire.AppendUTF16(b, "NTFS"), 16, wire.StatusSuccess
	case fsControlInformation:
		// No quotas: the thresholds and limit are "none".
		b = append(make([]byte, 24), 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF)
		return append(b, make([]byte, 8)...), 48, wire.StatusSuccess
	case fsObjectIDInformation:
		b = le.AppendUint64(nil, rootSt.dev)
		b = le.AppendUint64(b, rootSt.ino)
		return append(b, make([]byte, 48)...), 64, wire.StatusSuccess
	case fsSectorSizeInformation:
		for range 4 {
			b = le.AppendUint32(b, sector)
		}
		b = le.AppendUint32(b, 0x3) // aligned device and partition
		return append(b, make([]byte, 8)...), 28, wire.StatusSuccess
	}
	return nil, 0, wire.StatusInvalidInfoClass
}
