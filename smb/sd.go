//go:build linux

package smb

import "encoding/binary"

// Security information parts (MS-DTYP 2.4.7).
const (
	ownerSecurity = 0x1
	groupSecurity = 0x2
	daclSecurity  = 0x4
)

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

// securityDescriptor is a self-relative security descriptor synthesised
// from the file's owner, group and mode, with the parts addl asks for.
func securityDescriptor(st *fileStat, addl uint32) []byte {
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
	b := make([]byte, 20)
	b[0] = 1
	control := uint16(0x8000) // self-relative
	if addl&ownerSecurity != 0 {
		le.PutUint32(b[4:], uint32(len(b)))
		b = append(b, owner...)
	}
	if addl&groupSecurity != 0 {
		le.PutUint32(b[8:], uint32(len(b)))
		b = append(b, group...)
	}
	if addl&daclSecurity != 0 {
		control |= 0x0004 // DACL present
		le.PutUint32(b[16:], uint32(len(b)))
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
		b = append(b, acl...)
	}
	le.PutUint16(b[2:], control)
	return b
}
