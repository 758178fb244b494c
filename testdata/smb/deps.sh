#!/bin/sh
# deps.sh — installs what plug smb's tests and scripts run against (Debian,
# as root): smbclient, smbtorture (samba-testsuite), Samba's smbd (for the
# side-by-side scripts, and samba-vfs-modules for its streams_xattr),
# impacket for python3, setfattr/getfattr (attr: the streams tests check
# that the share's filesystem keeps user xattrs), and smbnetfs with FUSE
# and git (the mounted-share tests). It does nothing
# when they are all there. The Samba services the packages bring are
# stopped and disabled: the scripts start their own smbd on loopback.
set -eu
if command -v smbclient >/dev/null && command -v smbtorture >/dev/null && command -v smbd >/dev/null &&
	command -v setfattr >/dev/null && command -v smbnetfs >/dev/null && command -v fusermount3 >/dev/null &&
	command -v git >/dev/null && dpkg-query -W -f '${Status}' samba-vfs-modules 2>/dev/null | grep -q ' installed' &&
	/usr/bin/python3 -c 'import impacket.smbconnection' 2>/dev/null; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends smbclient samba samba-testsuite python3-impacket samba-vfs-modules attr smbnetfs fuse3 git
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
	systemctl disable --now smbd nmbd samba-ad-dc 2>/dev/null || true
fi
