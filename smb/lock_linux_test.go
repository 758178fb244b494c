//go:build linux

package smb_test

import "testing"

// TestLockReplay has smbtorture send LOCK requests again with the lock
// sequence of one that succeeded, on a durable open and on a resilient
// one: a replayed lock or unlock answers success and changes nothing, one
// with another number in the bucket (or in another bucket) is done, and
// buckets 0 and 65 are not checked.
func TestLockReplay(t *testing.T) {
	startServer(t).mustPassTorture(t, "smb2.lock.replay_smb3_specification_durable", "smb2.lock.replay_broken_windows")
}
