# lib.sh — shared by torture.sh and bench.sh: starts plug smb and Samba's
# smbd on loopback, each serving a fresh directory of its own, with the
# same user and password. Source it; call servers_up DIR, then use
# PLUG_PORT, SAMBA_PORT, SMB_USER, SMB_PASS; servers_down stops both.
# The caller sets here to this directory.
# The user is root because smbd needs a Unix account behind each of its
# users; plug takes any name.

SMB_USER=root
SMB_PASS=torture-pass-1
PLUG_PORT=${PLUG_PORT:-14451}
SAMBA_PORT=${SAMBA_PORT:-14452}

# need CMD... fails with what to install when a command is missing.
need() {
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || {
			echo "$0: $c is missing: apt-get install -y --no-install-recommends smbclient samba samba-testsuite" >&2
			exit 1
		}
	done
}

# servers_up DIR builds plug into DIR/plug and starts both servers, their
# shares in DIR/plug-share and DIR/samba/share, their logs in DIR.
servers_up() {
	work=$1
	need smbd smbpasswd smbclient go
	mkdir -p "$work/plug-share" "$work/samba/share" "$work/samba/private" "$work/samba/lock" \
		"$work/samba/state" "$work/samba/cache" "$work/samba/run" "$work/samba/ncalrpc"
	(cd "$here/../.." && go build -o "$work/plug" .)
	PLUG_SMB_USER=$SMB_USER PLUG_SMB_PASSWORD=$SMB_PASS "$work/plug" smb --addr "127.0.0.1:$PLUG_PORT" \
		--share share "$work/plug-share" >"$work/plug.log" 2>&1 &
	PLUG_PID=$!
	conf=$work/samba/smb.conf
	cat >"$conf" <<CONF
[global]
	server role = standalone server
	netbios name = SAMBATEST
	workgroup = WORKGROUP
	smb ports = $SAMBA_PORT
	interfaces = 127.0.0.1
	bind interfaces only = yes
	private dir = $work/samba/private
	lock directory = $work/samba/lock
	state directory = $work/samba/state
	cache directory = $work/samba/cache
	pid directory = $work/samba/run
	ncalrpc dir = $work/samba/ncalrpc
	log file = $work/samba/log.smbd
	passdb backend = tdbsam:$work/samba/private/passdb.tdb
	server signing = mandatory
	map to guest = never
	load printers = no
	printcap name = /dev/null
	disable spoolss = yes
	server min protocol = SMB2_02
[share]
	path = $work/samba/share
	read only = no
	vfs objects = acl_xattr streams_xattr
CONF
	# The Samba user is root: smbd needs a Unix account behind each user.
	printf '%s\n%s\n' "$SMB_PASS" "$SMB_PASS" | smbpasswd -c "$conf" -s -a "$SMB_USER" >/dev/null
	# smbd leads a process group of its own: on exit it signals its group.
	smbd --foreground --configfile="$conf" --debug-stdout -d 0 >"$work/samba.log" 2>&1 &
	SAMBA_PID=$!
	for p in $PLUG_PORT $SAMBA_PORT; do
		i=0
		until smbclient "//127.0.0.1/share" -p "$p" -U "$SMB_USER%$SMB_PASS" -c 'ls' >/dev/null 2>&1; do
			i=$((i + 1))
			if [ $i -gt 100 ]; then
				echo "$0: the server on port $p did not come up; see $work/plug.log and $work/samba.log" >&2
				servers_down
				exit 1
			fi
			sleep 0.1
		done
	done
}

servers_down() {
	[ -n "${PLUG_PID:-}" ] || return 0
	kill "$PLUG_PID" "$SAMBA_PID" 2>/dev/null || true
	wait "$PLUG_PID" "$SAMBA_PID" 2>/dev/null || true
}

# section FILE NAME PART replaces the part of FILE between the lines
# <!-- NAME --> and <!-- /NAME --> with the contents of PART (appending
# both markers and PART when FILE has none).
section() {
	[ -f "$1" ] || printf '# plug smb: conformance and throughput\n\n' >"$1"
	if ! grep -qx "<!-- $2 -->" "$1"; then
		printf '\n<!-- %s -->\n<!-- /%s -->\n' "$2" "$2" >>"$1"
	fi
	awk -v name="$2" -v part="$3" '
		$0 == "<!-- " name " -->" { print; while ((getline l < part) > 0) print l; skip = 1; next }
		$0 == "<!-- /" name " -->" { skip = 0 }
		!skip { print }
	' "$1" >"$1.new" && mv "$1.new" "$1"
}
