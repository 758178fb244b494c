//go:build linux

package smb

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Security descriptors (MS-DTYP 2.4.6). A file's is made from its owner,
// group and mode; the parts a client sets (owner, group, DACL; at create
// with the SecD context or with SET_INFO) are kept in the user xattr
// sdXattr, as a self-relative descriptor of maxSD bytes at most, and read
// back in place of the made ones. What is kept is what the file says,
// not what guards it: access is the file system's, by owner and mode, as
// the made DACL tells. SACLs are neither kept nor answered.
const (
	sdXattr = "user.plug.sd"
	maxSD   = 4096

	// Security information parts (MS-DTYP 2.4.7).
	ownerSecurity = 0x1
	groupSecurity = 0x2
	daclSecurity  = 0x4

	// Control bits (MS-DTYP 2.4.6).
	sdDACLPresent  = 0x0004
	sdSelfRelative = 0x8000
	// sdKept are the control bits kept with the parts they qualify: owner
	// and group defaulted, DACL defaulted, auto-inherit required,
	// auto-inherited and protected.
	sdKept = 0x0001 | 0x0002 | 0x0008 | 0x0100 | 0x0400 | 0x1000
)

// sdParts are the parts of a security descriptor; a nil part is absent.
// A DACL present but empty of bytes is a NULL DACL.
type sdParts struct {
	control      uint16 // of the sdKept bits
	owner, group []byte
	dacl         []byte
	hasDACL      bool
}

// unixSID is S-1-22-1-uid (a user) or S-1-22-2-gid (a group), as Samba
// names Unix ids.
func unixSID(kind, id uint32) []byte {
	b := []byte{1, 2, 0, 0, 0, 0, 0, 22}
	b = binary.LittleEndian.AppendUint32(b, kind)
	return binary.LittleEndian.AppendUint32(b, id)
}

var everyoneSID = []byte{1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}

// permAccess is the access a permission triplet (rwx) grants.
func permAccess(rwx uint32, dir bool) uint32 {
	var a uint32
	if rwx&4 != 0 {
		a |= accGenericRead
	}
	if rwx&2 != 0 {
		a |= accGenericWrite
		if dir {
			a |= accDeleteChild
		}
	}
	if rwx&1 != 0 {
		a |= accGenericExecute
	}
	return a
}

// modeParts are the descriptor parts made from the file's owner, group
// and mode.
func modeParts(st *fileStat) sdParts {
	le := binary.LittleEndian
	owner, group := unixSID(1, st.uid), unixSID(2, st.gid)
	dir := st.isDir()
	type ace struct {
		mask uint32
		sid  []byte
	}
	aces := []ace{
		{permAccess(st.mode>>6&7, dir) | accReadControl | accWriteDAC | accWriteOwner | accDelete | accWriteAttr | accWriteEA | accReadAttr, owner},
		{permAccess(st.mode>>3&7, dir), group},
		{permAccess(st.mode&7, dir), everyoneSID},
	}
	acl := []byte{2, 0, 0, 0}
	acl = le.AppendUint16(acl, uint16(len(aces)))
	acl = le.AppendUint16(acl, 0)
	for _, a := range aces {
		acl = append(acl, 0, 0) // ACCESS_ALLOWED, no flags
		acl = le.AppendUint16(acl, uint16(8+len(a.sid)))
		acl = le.AppendUint32(acl, a.mask)
		acl = append(acl, a.sid...)
	}
	le.PutUint16(acl[2:], uint16(len(acl)))
	return sdParts{owner: owner, group: group, dacl: acl, hasDACL: true}
}

// build is the self-relative descriptor of the parts of p that addl asks
// for.
func (p *sdParts) build(addl uint32) []byte {
	le := binary.LittleEndian
	b := make([]byte, 20)
	b[0] = 1
	control := uint16(sdSelfRelative)
	if addl&ownerSecurity != 0 && p.owner != nil {
		le.PutUint32(b[4:], uint32(len(b)))
		b = append(b, p.owner...)
		control |= p.control & 0x0001
	}
	if addl&groupSecurity != 0 && p.group != nil {
		le.PutUint32(b[8:], uint32(len(b)))
		b = append(b, p.group...)
		control |= p.control & 0x0002
	}
	if addl&daclSecurity != 0 && p.hasDACL {
		control |= sdDACLPresent | p.control&(0x0008|0x0100|0x0400|0x1000)
		if p.dacl != nil {
			le.PutUint32(b[16:], uint32(len(b)))
			b = append(b, p.dacl...)
		}
	}
	le.PutUint16(b[2:], control)
	return b
}

// sidAt is the SID at off in b, nil when it is not a whole one.
func sidAt(b []byte, off uint32) []byte {
	if off < 20 || uint64(off)+8 > uint64(len(b)) || b[off] != 1 || b[off+1] > 15 {
		return nil
	}
	end := uint64(off) + 8 + 4*uint64(b[off+1])
	if end > uint64(len(b)) {
		return nil
	}
	return b[off:end]
}

// aclAt is the ACL at off in b, its ACEs within it; nil when it is not a
// whole one.
func aclAt(b []byte, off uint32) []byte {
	le := binary.LittleEndian
	if off < 20 || uint64(off)+8 > uint64(len(b)) || b[off] != 2 && b[off] != 4 {
		return nil
	}
	size := uint64(le.Uint16(b[off+2:]))
	if size < 8 || uint64(off)+size > uint64(len(b)) {
		return nil
	}
	acl := b[off : uint64(off)+size]
	aces, at := le.Uint16(acl[4:]), 8
	for range aces {
		if at+4 > len(acl) {
			return nil
		}
		n := int(le.Uint16(acl[at+2:]))
		if n < 4 || at+n > len(acl) {
			return nil
		}
		at += n
	}
	return acl
}

// parseSD decodes the self-relative descriptor b; ok is false when it is
// not a whole one.
func parseSD(b []byte) (p sdParts, ok bool) {
	le := binary.LittleEndian
	if len(b) < 20 || b[0] != 1 {
		return p, false
	}
	control := le.Uint16(b[2:])
	if control&sdSelfRelative == 0 {
		return p, false
	}
	p.control = control & sdKept
	if off := le.Uint32(b[4:]); off != 0 {
		if p.owner = sidAt(b, off); p.owner == nil {
			return p, false
		}
	}
	if off := le.Uint32(b[8:]); off != 0 {
		if p.group = sidAt(b, off); p.group == nil {
			return p, false
		}
	}
	if control&sdDACLPresent != 0 {
		p.hasDACL = true
		if off := le.Uint32(b[16:]); off != 0 {
			if p.dacl = aclAt(b, off); p.dacl == nil {
				return p, false
			}
		}
	}
	return p, true
}

// checkSD is the status of a descriptor a client gives: success, or why
// it is not kept.
func checkSD(b []byte) uint32 {
	if _, ok := parseSD(b); !ok || len(b) > maxSD {
		return wire.StatusInvalidSecurityDescr
	}
	return wire.StatusSuccess
}

// fileSecurity is the descriptor of the file fd (O_PATH will do) with the
// parts addl asks for: those kept for it, else those its mode makes.
func fileSecurity(fd int, st *fileStat, addl uint32) []byte {
	p := modeParts(st)
	if kept, ok := keptSD(fd, st); ok {
		p.control = kept.control
		if kept.owner != nil {
			p.owner = kept.owner
		}
		if kept.group != nil {
			p.group = kept.group
		}
		if kept.hasDACL {
			p.dacl, p.hasDACL = kept.dacl, true
		}
	}
	return p.build(addl)
}

// keptSD is the descriptor kept for the file fd, ok false for none. A
// symbolic link keeps none (the xattr call would follow it).
func keptSD(fd int, st *fileStat) (sdParts, bool) {
	if !st.isDir() && !st.isReg() {
		return sdParts{}, false
	}
	buf := make([]byte, maxSD)
	n, err := unix.Getxattr(procPath(fd), sdXattr, buf)
	if err != nil {
		return sdParts{}, false
	}
	return parseSD(buf[:n])
}

// keepSD keeps the parts addl names of the descriptor b (checked by
// checkSD) for the file fd, over those kept before.
func keepSD(fd int, st *fileStat, b []byte, addl uint32) uint32 {
	if !st.isDir() && !st.isReg() {
		return wire.StatusNotSupported
	}
	given, _ := parseSD(b)
	p, _ := keptSD(fd, st)
	if addl&ownerSecurity != 0 {
		p.owner = given.owner
		p.control = p.control&^0x0001 | given.control&0x0001
	}
	if addl&groupSecurity != 0 {
		p.group = given.group
		p.control = p.control&^0x0002 | given.control&0x0002
	}
	if addl&daclSecurity != 0 {
		p.dacl, p.hasDACL = given.dacl, given.hasDACL
		p.control = p.control&(0x0001|0x0002) | given.control&(0x0008|0x0100|0x0400|0x1000)
	}
	out := p.build(ownerSecurity | groupSecurity | daclSecurity)
	if len(out) > maxSD {
		return wire.StatusInvalidSecurityDescr
	}
	if err := setXattrForce(fd, sdXattr, out); err != nil {
		return ntStatus(err)
	}
	return wire.StatusSuccess
}
