//go:build linux

package smb

import (
	"bytes"
	"encoding/binary"
	"testing"

	"plug/smb/internal/wire"
)

// TestSecurityDescriptorParts checks that a descriptor a client gives is
// kept part by part and read back as given, and that one whose offsets
// or ACL run outside it, or with a SID that is not one, or that is larger than maxSD, is refused.
func TestSecurityDescriptorParts(t *testing.T) {
	st := fileStat{mode: 0100640, uid: 1000, gid: 1000}
	made := modeParts(&st)
	world := []byte{1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	given := sdParts{owner: world, group: made.group, dacl: made.dacl, hasDACL: true, control: 0x1000}
	b := given.build(ownerSecurity | groupSecurity | daclSecurity)
	if checkSD(b) != wire.StatusSuccess {
		t.Fatalf("a whole descriptor is refused: %x", b)
	}
	p, _ := parseSD(b)
	if got := p.build(ownerSecurity | groupSecurity | daclSecurity); !bytes.Equal(got, b) {
		t.Errorf("read back %x, set %x", got, b)
	}
	if got := p.build(ownerSecurity); binary.LittleEndian.Uint32(got[16:]) != 0 || !bytes.Equal(got[20:], world) {
		t.Errorf("the owner alone is %x", got)
	}
	le := binary.LittleEndian
	bad := map[string]func([]byte){
		"owner past the end":  func(b []byte) { le.PutUint32(b[4:], uint32(len(b))) },
		"owner in the header": func(b []byte) { le.PutUint32(b[4:], 4) },
		"SID of revision 2":   func(b []byte) { b[le.Uint32(b[4:])] = 2 },
		"ACL larger than it":  func(b []byte) { le.PutUint16(b[le.Uint32(b[16:])+2:], 0xFFF0) },
		"ACE past its ACL":    func(b []byte) { le.PutUint16(b[le.Uint32(b[16:])+4:], 50) },
		"not self-relative":   func(b []byte) { le.PutUint16(b[2:], sdDACLPresent) },
	}
	for name, spoil := range bad {
		c := append([]byte(nil), b...)
		spoil(c)
		if checkSD(c) != wire.StatusInvalidSecurityDescr {
			t.Errorf("%s: accepted", name)
		}
	}
	big := sdParts{hasDACL: true, dacl: make([]byte, maxSD)}
	le.PutUint16(big.dacl, 2)
	le.PutUint16(big.dacl[2:], maxSD)
	if checkSD(big.build(daclSecurity)) != wire.StatusInvalidSecurityDescr {
		t.Errorf("a descriptor over %d bytes is accepted", maxSD)
	}
}
