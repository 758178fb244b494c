//go:build linux

package smb_test

import "testing"

// TestOplockBreakRules has smbtorture check the oplock break rules
// Windows has and smbtorture's oplock suite asks for: no break for an
// open the share mode refuses anyway (exclusive), nor for a stat open,
// nor for an open of a file whose delete is pending; a break to none of
// every level II oplock, the writer's or locker's own too, on a write or
// a byte-range lock, and on setting the size or allocation of the file
// (after the open of that set, for MAXIMUM_ALLOWED, judged by the access
// it gets); a named stream's oplock apart from its file's.
func TestOplockBreakRules(t *testing.T) {
	startServer(t).mustPassTorture(t,
		"smb2.oplock.exclusive1",
		"smb2.oplock.exclusive3",
		"smb2.oplock.exclusive4",
		"smb2.oplock.batch1",
		"smb2.oplock.batch6",
		"smb2.oplock.batch8",
		"smb2.oplock.batch12",
		"smb2.oplock.batch26",
		"smb2.oplock.doc",
		"smb2.oplock.brl1",
		"smb2.oplock.brl3",
		"smb2.oplock.levelii500",
		"smb2.oplock.statopen1",
	)
}
