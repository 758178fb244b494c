//go:build linux

package smb_test

import "testing"

// TestSecurityDescriptorKept has smbtorture create files and directories
// with a descriptor (an ACE added to the one read back; another owner and
// group) and read each back as it was set.
func TestSecurityDescriptorKept(t *testing.T) {
	startServer(t).mustPassTorture(t, "smb2.create.aclfile", "smb2.create.acldir")
}
