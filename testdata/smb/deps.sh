#!/bin/sh
# deps.sh — installs what plug smb's tests and scripts run against (Debian,
# as root): smbclient, smbtorture (samba-testsuite), Samba's smbd (for the
# side-by-side scripts) and impacket for python3. It does nothing when
# they are all there. The Samba services the packages bring are stopped
# and disabled: the scripts start their own smbd on loopback.
set -eu
if command -v smbclient >/dev/null && command -v smbtorture >/dev/null && command -v smbd >/dev/null &&
	/usr/bin/python3 -c 'import impacket.smbconnection' 2>/dev/null; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends smbclient samba samba-testsuite python3-impacket
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
	systemctl disable --now smbd nmbd samba-ad-dc 2>/dev/null || true
fi
