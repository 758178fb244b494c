package cli

import (
	"fmt"
	"os"
	"syscall"
)

// becomeOwner makes the process the owner of dir, uid and gid, with no
// other group (plug smb --as-owner). A process started as root with only
// SETUID and SETGID drops them with it.
func becomeOwner(dir string) (uid, gid int, err error) {
	st, err := os.Stat(dir)
	if err != nil {
		return 0, 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("cannot read the owner of %s", dir)
	}
	uid, gid = int(sys.Uid), int(sys.Gid)
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return uid, gid, fmt.Errorf("setgroups: %w (the helper needs the capability SETGID)", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return uid, gid, fmt.Errorf("setgid %d: %w (the helper needs the capability SETGID)", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return uid, gid, fmt.Errorf("setuid %d: %w (the helper needs the capability SETUID)", uid, err)
	}
	return uid, gid, nil
}
