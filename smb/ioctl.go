//go:build linux

package smb

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// FSCTL codes served.
const (
	fsctlDFSGetReferrals      = 0x00060194
	fsctlDFSGetReferralsEx    = 0x000601B0
	fsctlValidateNegotiate    = 0x00140204
	fsctlQueryNetworkIfInfo   = 0x001401FC
	fsctlRequestResumeKey     = 0x00140078
	fsctlEnumerateSnapshots   = 0x00144064
	fsctlCopyChunk            = 0x001440F2
	fsctlCopyChunkWrite       = 0x001480F2
	fsctlSetSparse            = 0x000900C4
	fsctlGetReparsePoint      = 0x000900A8
	fsctlFileLevelTrim        = 0x00098208
	fsctlCreateOrGetObjectID  = 0x000900C0
	fsctlQueryAllocatedRanges = 0x000940CF
	fsctlSetZeroData          = 0x000980C8
	fsctlGetCompression       = 0x0009003C
	fsctlSetCompression       = 0x0009C040
	ioctlIsFSCTL              = 1

	// Copy-chunk limits (MS-SMB2 3.3.3): chunks per request, bytes per
	// chunk, bytes per request.
	copyMaxChunks     = 256
	copyMaxChunkBytes = 1 << 20
	copyMaxTotalBytes = 16 << 20
)

// resumeKeySalt makes resume keys unguessable across connections.
var resumeKeySalt = func() [16]byte {
	var b [16]byte
	rand.Read(b[:])
	return b
}()

func (c *conn) ioctl(r *request) (uint32, error) {
	b := r.body
	le := binary.LittleEndian
	code := le.Uint32(b[4:])
	fid := b[8:24]
	in, err := wire.Field(r.msg, le.Uint32(b[24:]), le.Uint32(b[28:]), wire.HeaderSize+56)
	if err != nil {
		return wire.StatusInvalidParameter, nil
	}
	maxOut := le.Uint32(b[44:])
	if le.Uint32(b[48:]) != ioctlIsFSCTL {
		return wire.StatusNotSupported, nil
	}
	if maxOut > c.maxSize() || uint32(len(in)) > c.maxSize() || !c.chargeOK(r, max(uint32(len(in)), maxOut)) {
		return wire.StatusInvalidParameter, nil
	}
	var out []byte
	status := wire.StatusSuccess
	switch code {
	case fsctlValidateNegotiate:
		if out, err = c.validateNegotiate(r, in); err != nil {
			return 0, err
		}
		if out == nil {
			return wire.StatusInvalidParameter, nil
		}
	case fsctlDFSGetReferrals, fsctlDFSGetReferralsEx:
		return wire.StatusFSDriverRequired, nil
	case fsctlQueryNetworkIfInfo:
		return wire.StatusNotSupported, nil
	default:
		if r.tree.ipc {
			return wire.StatusNotSupported, nil
		}
		o, st := c.fileFor(r, fid)
		if st != wire.StatusSuccess {
			return st, nil
		}
		status, out = c.fileIoctl(o, code, in, maxOut)
	}
	if status != wire.StatusSuccess && out == nil {
		return status, nil
	}
	if uint32(len(out)) > maxOut {
		return wire.StatusBufferTooSmall, nil
	}
	r.out = appendIoctlResponse(r.out, code, fid, out)
	return status, nil
}

// fileIoctl answers the FSCTLs on an open file.
func (c *conn) fileIoctl(o *open, code uint32, in []byte, maxOut uint32) (uint32, []byte) {
	le := binary.LittleEndian
	switch code {
	case fsctlRequestResumeKey:
		out := le.AppendUint64(nil, o.id)
		out = append(out, resumeKeySalt[:]...)
		return wire.StatusSuccess, append(out, 0, 0, 0, 0, 0, 0, 0, 0)
	case fsctlEnumerateSnapshots:
		// No snapshots are kept (an open of one finds none): the list of
		// previous versions is empty, and its size that of the empty
		// list's terminating null (MS-SMB2 3.3.5.15.1).
		if maxOut < 16 {
			return wire.StatusInvalidParameter, nil
		}
		out := le.AppendUint64(nil, 0) // versions, versions returned
		out = le.AppendUint32(out, 2)
		return wire.StatusSuccess, append(out, 0, 0)
	case fsctlCopyChunk, fsctlCopyChunkWrite:
		if maxOut < 12 {
			return wire.StatusInvalidParameter, nil
		}
		return c.copyChunk(o, code, in)
	case fsctlFileLevelTrim:
		if o.access&(accWriteData|accAppendData) == 0 {
			return wire.StatusAccessDenied, nil
		}
		return wire.StatusSuccess, nil
	case fsctlSetSparse:
		return c.setSparse(o, in), nil
	case fsctlQueryAllocatedRanges:
		return c.allocatedRanges(o, in, maxOut)
	case fsctlSetZeroData:
		return c.zeroData(o, in), nil
	case fsctlGetReparsePoint:
		return wire.StatusNotAReparsePoint, nil
	case fsctlCreateOrGetObjectID:
		// The object id is the file's inode and device: stable, unique
		// on the share.
		st, err := fstat(o.fd)
		if err != nil {
			return ntStatus(err), nil
		}
		out := le.AppendUint64(nil, st.ino)
		out = le.AppendUint64(out, st.dev)
		return wire.StatusSuccess, append(out, make([]byte, 48)...)
	case fsctlRequestResiliency:
		return c.requestResiliency(o, in), nil
	case fsctlGetCompression:
		return wire.StatusSuccess, []byte{0, 0}
	case fsctlSetCompression:
		if len(in) < 2 {
			return wire.StatusInvalidParameter, nil
		}
		if le.Uint16(in) != 0 {
			return wire.StatusNotSupported, nil
		}
		return wire.StatusSuccess, nil
	}
	return wire.StatusNotSupported, nil
}

// appendIoctlResponse appends an IOCTL response body with output out.
func appendIoctlResponse(b []byte, code uint32, fid, out []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint16(b, 49)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, code)
	b = append(b, fid...)
	const at = wire.HeaderSize + 48
	b = le.AppendUint32(b, at)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, at)
	b = le.AppendUint32(b, uint32(len(out)))
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	return append(b, out...)
}

// validateNegotiate checks FSCTL_VALIDATE_NEGOTIATE_INFO against what
// the connection negotiated: a mismatch means the NEGOTIATE was tampered
// with, and ends the connection.
func (c *conn) validateNegotiate(r *request, in []byte) ([]byte, error) {
	if c.dialect == wire.Dialect311 {
		return nil, closeConn("VALIDATE_NEGOTIATE_INFO on a 3.1.1 connection")
	}
	if r.h.Flags&wire.FlagSigned == 0 && !r.encrypted {
		return nil, closeConn("an unsigned VALIDATE_NEGOTIATE_INFO")
	}
	le := binary.LittleEndian
	if len(in) < 24 {
		return nil, nil
	}
	n := int(le.Uint16(in[22:]))
	if len(in) < 24+2*n {
		return nil, nil
	}
	same := le.Uint32(in) == c.clientCaps && bytes.Equal(in[4:20], c.clientGUID[:]) &&
		le.Uint16(in[20:]) == c.clientSecMode && n == len(c.clientDialects)
	for i := 0; same && i < n; i++ {
		same = le.Uint16(in[24+2*i:]) == c.clientDialects[i]
	}
	if !same {
		return nil, closeConn("VALIDATE_NEGOTIATE_INFO does not match the NEGOTIATE")
	}
	out := le.AppendUint32(nil, c.serverCaps)
	out = append(out, c.srv.guid[:]...)
	out = le.AppendUint16(out, c.serverSecMode)
	return le.AppendUint16(out, c.dialect), nil
}

// copyChunk is FSCTL_SRV_COPYCHUNK(_WRITE): ranges of a source file
// (named by its resume key) copied into o on the server.
func (c *conn) copyChunk(o *open, code uint32, in []byte) (uint32, []byte) {
	le := binary.LittleEndian
	limits := func() []byte {
		out := le.AppendUint32(nil, copyMaxChunks)
		out = le.AppendUint32(out, copyMaxChunkBytes)
		return le.AppendUint32(out, copyMaxTotalBytes)
	}
	if len(in) < 32 {
		return wire.StatusInvalidParameter, nil
	}
	count := int(le.Uint32(in[24:]))
	if count > copyMaxChunks || len(in) < 32+24*count {
		return wire.StatusInvalidParameter, limits()
	}
	var total uint64
	for i := 0; i < count; i++ {
		n := le.Uint32(in[32+24*i+16:])
		if n == 0 || n > copyMaxChunkBytes {
			return wire.StatusInvalidParameter, limits()
		}
		total += uint64(n)
	}
	if total > copyMaxTotalBytes {
		return wire.StatusInvalidParameter, limits()
	}
	if !bytes.Equal(in[8:24], append(resumeKeySalt[:], 0, 0, 0, 0, 0, 0, 0, 0)[:16]) {
		return wire.StatusObjectNameNotFound, nil
	}
	c.mu.Lock()
	src := c.opens[le.Uint64(in)]
	c.mu.Unlock()
	if src == nil || src.isDir || o.isDir {
		return wire.StatusObjectNameNotFound, nil
	}
	if o.access&accWriteData == 0 || code == fsctlCopyChunk && o.access&accReadData == 0 || src.access&(accReadData|accExecute) == 0 {
		return wire.StatusAccessDenied, nil
	}
	src.io.RLock()
	defer src.io.RUnlock()
	o.io.RLock()
	defer o.io.RUnlock()
	if src.closed || o.closed {
		return wire.StatusFileClosed, nil
	}
	var written uint64
	// An error past this point still answers how far the copy got.
	progress := func(status uint32, chunks int) (uint32, []byte) {
		out := le.AppendUint32(nil, uint32(chunks))
		out = le.AppendUint32(out, 0)
		return status, le.AppendUint32(out, uint32(written))
	}
	c.srv.files.breakLevelII(o)
	for i := 0; i < count; i++ {
		ch := in[32+24*i:]
		soff, doff, n := int64(le.Uint64(ch)), int64(le.Uint64(ch[8:])), int(le.Uint32(ch[16:]))
		if soff < 0 || doff < 0 {
			return progress(wire.StatusInvalidParameter, i)
		}
		if c.srv.files.lockConflict(src, uint64(soff), uint64(n), false) || c.srv.files.lockConflict(o, uint64(doff), uint64(n), true) {
			return progress(wire.StatusFileLockConflict, i)
		}
		st, err := fstat(src.fd)
		if src.stream != "" {
			c.streamStat(src, &st)
		}
		if err != nil || soff+int64(n) > st.size {
			return progress(wire.StatusInvalidViewSize, i)
		}
		if src.stream != "" || o.stream != "" {
			if status := c.copyStream(src, soff, o, doff, n); status != wire.StatusSuccess {
				return progress(status, i)
			}
			written += uint64(n)
			continue
		}
		m, err := copyRange(src.fd, soff, o.fd, doff, n)
		written += uint64(m)
		if err != nil {
			return progress(ntStatus(err), i)
		}
	}
	c.srv.notifyChange(o.node.path, notifyModified, false)
	out := le.AppendUint32(nil, uint32(count))
	out = le.AppendUint32(out, 0)
	return wire.StatusSuccess, le.AppendUint32(out, uint32(written))
}

// setSparse is FSCTL_SET_SPARSE: the sparse attribute, set (or with a
// zero first byte of input, cleared). Linux files are sparse where they
// have holes whatever the attribute says.
func (c *conn) setSparse(o *open, in []byte) uint32 {
	if o.isDir {
		return wire.StatusInvalidParameter
	}
	if o.access&(accWriteData|accAppendData|accWriteAttr) == 0 {
		return wire.StatusAccessDenied
	}
	st, err := fstat(o.fd)
	if err != nil {
		return ntStatus(err)
	}
	a := c.attrs(o.node.path, &st) & attrStored
	if len(in) == 0 || in[0] != 0 {
		a |= attrSparse
	} else {
		a &^= attrSparse
	}
	var ct uint64
	if st.hasDos {
		ct = st.btime
	}
	if err := writeDos(o.fd, a, ct); err != nil && err != unix.ENOTSUP {
		return ntStatus(err)
	}
	return wire.StatusSuccess
}

// allocatedRanges is FSCTL_QUERY_ALLOCATED_RANGES: the ranges of the file
// holding data, from SEEK_DATA and SEEK_HOLE, within the range asked.
func (c *conn) allocatedRanges(o *open, in []byte, maxOut uint32) (uint32, []byte) {
	le := binary.LittleEndian
	if len(in) < 16 {
		return wire.StatusInvalidParameter, nil
	}
	off, n := int64(le.Uint64(in)), int64(le.Uint64(in[8:]))
	if off < 0 || n < 0 || off+n < off {
		return wire.StatusInvalidParameter, nil
	}
	if o.isDir {
		return wire.StatusInvalidParameter, nil
	}
	if o.access&accReadData == 0 {
		return wire.StatusAccessDenied, nil
	}
	st, err := fstat(o.fd)
	if err != nil {
		return ntStatus(err), nil
	}
	end := min(off+n, st.size)
	var out []byte
	if c.attrs(o.node.path, &st)&attrSparse == 0 {
		// A file not marked sparse is allocated throughout, as on NTFS.
		if off >= end {
			return wire.StatusSuccess, nil
		}
		if maxOut < 16 {
			return wire.StatusBufferTooSmall, nil
		}
		out = le.AppendUint64(out, uint64(off))
		return wire.StatusSuccess, le.AppendUint64(out, uint64(end-off))
	}
	for at := off; at < end; {
		data, err := unix.Seek(o.fd, at, unix.SEEK_DATA)
		if err != nil || data >= end {
			break
		}
		hole, err := unix.Seek(o.fd, data, unix.SEEK_HOLE)
		if err != nil || hole > end {
			hole = end
		}
		if uint32(len(out)+16) > maxOut {
			if len(out) == 0 {
				return wire.StatusBufferTooSmall, nil
			}
			return wire.StatusBufferOverflow, out
		}
		out = le.AppendUint64(out, uint64(data))
		out = le.AppendUint64(out, uint64(hole-data))
		at = hole
	}
	return wire.StatusSuccess, out
}

// zeroData is FSCTL_SET_ZERO_DATA: the range made zeros, its blocks given
// back where the file system can punch holes.
func (c *conn) zeroData(o *open, in []byte) uint32 {
	le := binary.LittleEndian
	if len(in) < 16 {
		return wire.StatusInvalidParameter
	}
	off, beyond := int64(le.Uint64(in)), int64(le.Uint64(in[8:]))
	if off < 0 || beyond < off {
		return wire.StatusInvalidParameter
	}
	if o.isDir {
		return wire.StatusInvalidParameter
	}
	if o.access&accWriteData == 0 {
		return wire.StatusAccessDenied
	}
	st, err := fstat(o.fd)
	if err != nil {
		return ntStatus(err)
	}
	beyond = min(beyond, st.size)
	if beyond <= off {
		return wire.StatusSuccess
	}
	if c.srv.files.lockConflict(o, uint64(off), uint64(beyond-off), true) {
		return wire.StatusFileLockConflict
	}
	c.srv.files.breakLevelII(o)
	// Only a sparse file gives blocks back (as many as the file system
	// can); the rest is written over with zeros.
	var from, to int64 = beyond, beyond
	if c.attrs(o.node.path, &st)&attrSparse != 0 {
		if err := unix.Fallocate(o.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, beyond-off); err == nil {
			from, to = off, beyond
		}
	}
	if err := writeZeros(o.fd, off, min(from, beyond)); err != nil {
		return ntStatus(err)
	}
	if err := writeZeros(o.fd, to, beyond); err != nil {
		return ntStatus(err)
	}
	c.srv.notifyChange(o.node.path, notifyModified, false)
	return wire.StatusSuccess
}

// copyRange copies n bytes from src at soff to dst at doff: in the kernel
// where it can, through a buffer where it cannot (a range overlapping
// itself in one file).
func copyRange(src int, soff int64, dst int, doff int64, n int) (int, error) {
	done := 0
	for done < n {
		m, err := unix.CopyFileRange(src, &soff, dst, &doff, n-done, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || m == 0 {
			break
		}
		done += m
	}
	if done == n {
		return done, nil
	}
	buf := make([]byte, min(n-done, 1<<20))
	for done < n {
		k := min(len(buf), n-done)
		r, err := unix.Pread(src, buf[:k], soff)
		if err != nil {
			return done, err
		}
		if r == 0 {
			return done, unix.EIO
		}
		if _, err := unix.Pwrite(dst, buf[:r], doff); err != nil {
			return done, err
		}
		soff += int64(r)
		doff += int64(r)
		done += r
	}
	return done, nil
}

// writeZeros writes zeros over [from, to) of fd.
func writeZeros(fd int, from, to int64) error {
	if to <= from {
		return nil
	}
	zeros := make([]byte, min(to-from, 64<<10))
	for at := from; at < to; {
		m := min(int64(len(zeros)), to-at)
		if _, err := unix.Pwrite(fd, zeros[:m], at); err != nil {
			return err
		}
		at += m
	}
	return nil
}
