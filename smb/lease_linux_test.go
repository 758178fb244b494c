//go:build linux

package smb_test

import "testing"

// TestLeaseTorture has smbtorture take leases v1 and v2 and contend them
// from other opens, oplocks, writes and byte-range locks, on one
// connection and on several (other clients of the same server): each
// subtest checks the states granted, the break notifications each holder
// is sent (from and to which state, whether to acknowledge), that a
// contending open waits for the acknowledgment, and the durable opens
// with a lease kept across a cut connection.
func TestLeaseTorture(t *testing.T) {
	startServer(t).mustPassTorture(t,
		"smb2.lease.nobreakself",
		"smb2.lease.statopen",
		"smb2.lease.upgrade",
		"smb2.lease.upgrade3",
		"smb2.lease.break",
		"smb2.lease.breaking1",
		"smb2.lease.break_twice",
		"smb2.lease.lock1",
		"smb2.lease.v2_epoch2",
		"smb2.lease.unlink",
		"smb2.durable-open.open-lease",
		"smb2.durable-open.reopen2-lease",
		"smb2.durable-open.reopen2-lease-v2",
		"smb2.durable-open.lease",
		"smb2.durable-open.lock-lease",
		"smb2.durable-open.open2-lease",
		"smb2.durable-open.stat-open",
		"smb2.durable-v2-open.reopen1a-lease",
		"smb2.durable-v2-open.reopen2-lease-v2",
		"smb2.durable-v2-open.app-instance",
	)
}

// TestLeaseRenameAndStreams has smbtorture rename a file others hold
// handle-caching leases on: the rename waits until they acknowledge the
// break to a state without H (the new name not there meanwhile), and the
// renamer's own lease is not broken; and lease files, streams (a key of
// their own) and directories (no lease, no size) in the states Windows
// grants.
func TestLeaseRenameAndStreams(t *testing.T) {
	startServer(t).mustPassTorture(t,
		"smb2.lease.request",
		"smb2.lease.rename_wait",
		"smb2.lease.v2_rename",
	)
}

// TestLeaseBreakSteps has smbtorture contend a lease that is breaking
// already: opens that need less meanwhile are asked for once the holder
// acknowledges, in steps (to R, then to none) with the epoch of the first
// break, the opens answered only after the last; and an overwrite of a
// file whose lease caches no writes is not held back by the break it
// causes.
func TestLeaseBreakSteps(t *testing.T) {
	startServer(t).mustPassTorture(t,
		"smb2.lease.breaking3",
		"smb2.lease.v2_breaking3",
		"smb2.lease.breaking4",
	)
}
