//go:build linux

package smb

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// chargeFor is the credit charge a request moving n bytes must carry.
func (c *conn) chargeOK(r *request, n uint32) bool {
	if c.dialect == wire.Dialect202 {
		return true
	}
	need := (max(n, 1)-1)/65536 + 1
	return uint32(max(r.h.CreditCharge, 1)) >= need
}

// ioFile resolves the file of a READ or WRITE and holds it open for the
// I/O: the caller releases it with o.io.RUnlock.
func (c *conn) ioFile(r *request) (*open, uint32) {
	b := r.body
	if len(b) < 48 || binary.LittleEndian.Uint16(b) != 49 {
		return nil, wire.StatusInvalidParameter
	}
	o, status := c.fileFor(r, b[16:32])
	if status != wire.StatusSuccess {
		return nil, status
	}
	o.io.RLock()
	if o.closed {
		o.io.RUnlock()
		return nil, wire.StatusFileClosed
	}
	return o, wire.StatusSuccess
}

// read and write answer READ and WRITE.
func (c *conn) read(r *request) uint32  { return c.withIOFile(r, c.readFile) }
func (c *conn) write(r *request) uint32 { return c.withIOFile(r, c.writeFile) }

// withIOFile answers a READ or WRITE with answer, on its file held open
// for the I/O.
func (c *conn) withIOFile(r *request, answer func(*request, *open) uint32) uint32 {
	o, status := c.ioFile(r)
	if status != wire.StatusSuccess {
		return status
	}
	defer o.io.RUnlock()
	return answer(r, o)
}

// ioExtent is the Length (at 4) and Offset (at 8) that the body b of a
// READ or WRITE begins with.
func ioExtent(b []byte) (length uint32, off uint64) {
	return binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint64(b[8:])
}

// readFile answers a READ of the open file o.
func (c *conn) readFile(r *request, o *open) uint32 {
	le := binary.LittleEndian
	length, off := ioExtent(r.body)
	minCount := le.Uint32(r.body[32:])
	// Nothing is read past the largest offset there is.
	if length > c.maxSize() || !c.chargeOK(r, length) || off > math.MaxInt64 || off+uint64(length) > math.MaxInt64 {
		return wire.StatusInvalidParameter
	}
	if o.isDir || o.quota {
		return wire.StatusInvalidDeviceRequest
	}
	if o.access&(accReadData|accExecute) == 0 {
		return wire.StatusAccessDenied
	}
	if c.srv.files.lockConflict(o, off, uint64(length), false) {
		return wire.StatusFileLockConflict
	}
	at := len(r.out)
	out := append(r.out, make([]byte, 16)...)
	out = slices.Grow(out, int(length))
	data := out[len(out) : len(out)+int(length)]
	var n int
	var err error
	if o.stream != "" {
		n, err = readStreamAt(o, data, off)
	} else {
		n, err = fullIO(unix.Pread, o.fd, data, int64(off))
	}
	if err != nil {
		r.out = out[:at]
		return ntStatus(err)
	}
	if n == 0 && length > 0 || uint32(n) < minCount {
		r.out = out[:at]
		return wire.StatusEndOfFile
	}
	out[at] = 17
	out[at+2] = wire.HeaderSize + 16
	le.PutUint32(out[at+4:], uint32(n))
	r.out = out[:len(out)+n]
	o.setPosition(off + uint64(n))
	return wire.StatusSuccess
}

// writeFile answers a WRITE to the open file o.
func (c *conn) writeFile(r *request, o *open) uint32 {
	le := binary.LittleEndian
	b := r.body
	length, off := ioExtent(b)
	flags := le.Uint32(b[44:])
	if length > c.maxSize() || !c.chargeOK(r, length) {
		return wire.StatusInvalidParameter
	}
	data, err := wire.Field(r.msg, uint32(le.Uint16(b[2:])), length, wire.HeaderSize+48)
	if err != nil {
		return wire.StatusInvalidParameter
	}
	if o.isDir {
		return wire.StatusInvalidDeviceRequest
	}
	if o.access&(accWriteData|accAppendData) == 0 {
		return wire.StatusAccessDenied
	}
	if o.stream != "" {
		if status := c.writeStreamAt(o, data, off); status != wire.StatusSuccess {
			return status
		}
		return c.appendWriteResponse(r, len(data))
	}
	if off == ^uint64(0) && o.access&accWriteData == 0 {
		// Appending: at the end.
		st, err := fstat(o.fd)
		if err != nil {
			return ntStatus(err)
		}
		off = uint64(st.size)
	}
	if off > math.MaxInt64 {
		return wire.StatusInvalidParameter
	}
	if length == 0 {
		return c.appendWriteResponse(r, 0)
	}
	if off >= maxFileSize {
		return wire.StatusInvalidParameter
	}
	if off+uint64(length) >= maxFileSize {
		return wire.StatusDiskFull
	}
	if c.srv.files.lockConflict(o, off, uint64(length), true) {
		return wire.StatusFileLockConflict
	}
	c.srv.files.breakLevelII(o)
	c.beforeWrite(o)
	n, err := fullIO(unix.Pwrite, o.fd, data, int64(off))
	o.afterWrite()
	if err != nil {
		return ntStatus(err)
	}
	if flags&1 != 0 || o.options&optWriteThrough != 0 {
		unix.Fdatasync(o.fd)
	}
	c.srv.notifyChange(o.node.path, notifyModified, false)
	o.setPosition(off + uint64(n))
	return c.appendWriteResponse(r, n)
}

// fullIO moves all of data from or to the file fd at off with pio
// (unix.Pread or unix.Pwrite), calling it again when a call was interrupted
// or moved less; it stops early only when a call moves nothing (a read at
// the end of the file). n is how much moved.
func fullIO(pio func(fd int, p []byte, off int64) (int, error), fd int, data []byte, off int64) (n int, err error) {
	for n < len(data) {
		m, err := pio(fd, data[n:], off+int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// maxFileSize is where NTFS files end, which clients expect of a share:
// 16 TiB less 64 KiB. A write from there is invalid, one reaching it
// finds the disk full.
const maxFileSize = 0xfffffff0000

func (c *conn) appendWriteResponse(r *request, n int) uint32 {
	le := binary.LittleEndian
	out := le.AppendUint16(r.out, 17)
	out = le.AppendUint16(out, 0)
	out = le.AppendUint32(out, uint32(n))
	r.out = append(out, make([]byte, 8)...)
	return wire.StatusSuccess
}

// setPosition records the file position after a read or write, for
// FilePositionInformation.
func (o *open) setPosition(p uint64) {
	o.mu.Lock()
	o.position = p
	o.mu.Unlock()
}

// flush answers FLUSH.
func (c *conn) flush(r *request) uint32 {
	o, status := c.fileOf24(r)
	if status != wire.StatusSuccess {
		return status
	}
	if !o.isDir && o.access&(accWriteData|accAppendData) == 0 {
		return wire.StatusAccessDenied
	}
	// Writes under way finish first.
	o.io.Lock()
	err := unix.Fsync(o.fd)
	o.io.Unlock()
	c.moveWriteTime(o)
	if err != nil && err != unix.EBADF && err != unix.EINVAL {
		return ntStatus(err)
	}
	r.out = binary.LittleEndian.AppendUint32(r.out, 4)
	return wire.StatusSuccess
}
