#!/bin/sh
# bench.sh — throughput of plug smb next to Samba (Debian's 4.17), in the
# same run on loopback: smbclient puts and gets a 1 GiB file over SMB 3.1.1
# with signing required, ROUNDS times against each server in turn, and the
# medians and their ratio go into RESULTS.md beside this script. Shares and
# the local file sit in /dev/shm, so that the disk is not what is measured.
#
#   testdata/smb/bench.sh [ROUNDS]     (as root: smbd needs it; default 3)
#
# Needs: go, smbd, smbpasswd, smbclient (testdata/smb/deps.sh installs them).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rounds=${1:-3}
work=$(mktemp -d /dev/shm/plug-bench.XXXXXX)
trap 'servers_down; rm -rf "$work"' EXIT
servers_up "$work"
head -c 1073741824 /dev/urandom >"$work/big.bin"
size=1073741824

# seconds CMD... runs CMD and prints how long it took.
seconds() {
	s=$(date +%s.%N)
	"$@" >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
	e=$(date +%s.%N)
	echo "$s $e" | awk '{ printf "%.3f\n", $2 - $1 }'
}

client() {
	(cd "$work" && smbclient -s /dev/null //127.0.0.1/share -p "$1" -U "$SMB_USER%$SMB_PASS" \
		--option=clientmaxprotocol=SMB3_11 --option=clientsigning=required -c "$2")
}

: >"$work/times"
for r in $(seq "$rounds"); do
	for server in plug samba; do
		port=$PLUG_PORT
		[ "$server" = samba ] && port=$SAMBA_PORT
		put=$(seconds client "$port" "put big.bin")
		get=$(seconds client "$port" "get big.bin back.bin")
		cmp -s "$work/big.bin" "$work/back.bin" || { echo "$0: $server returned other bytes" >&2; exit 1; }
		rm -f "$work/back.bin"
		client "$port" "rm big.bin" >/dev/null
		echo "$server $put $get" >>"$work/times"
		echo "bench: round $r $server: put ${put}s get ${get}s" >&2
	done
done

# median SERVER FIELD is the median of a column of times (2: put, 3: get).
median() {
	awk -v s="$1" -v f="$2" '$1 == s { print $f }' "$work/times" | sort -n |
		awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
mbs() { awk -v t="$1" -v n="$size" 'BEGIN { printf "%.0f", n / t / 1048576 }'; }

pp=$(median plug 2) pg=$(median plug 3) sp=$(median samba 2) sg=$(median samba 3)
{
	echo "## Throughput: plug smb and Samba, side by side"
	echo
	echo "Made by \`testdata/smb/bench.sh $rounds\` on $(date -u +%Y-%m-%d): smbclient $(smbclient --version | sed 's/Version //')"
	echo "puts and gets a 1 GiB file over SMB 3.1.1 with signing required (AES-128-GMAC), on loopback,"
	echo "$rounds rounds against each server in turn; shares and the local file in /dev/shm. Medians;"
	echo "MiB/s is 1 GiB over the wall time of the smbclient command (connect and log on included)."
	echo "The machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
	echo
	echo "| | plug | Samba $(smbd --version | sed 's/Version //') | plug ÷ Samba |"
	echo "|---|---:|---:|---:|"
	echo "| put 1 GiB | $(mbs "$pp") MiB/s (${pp} s) | $(mbs "$sp") MiB/s (${sp} s) | $(awk -v a="$pp" -v b="$sp" 'BEGIN { printf "%.2f×", b / a }') |"
	echo "| get 1 GiB | $(mbs "$pg") MiB/s (${pg} s) | $(mbs "$sg") MiB/s (${sg} s) | $(awk -v a="$pg" -v b="$sg" 'BEGIN { printf "%.2f×", b / a }') |"
	echo
	echo "Every round:"
	echo
	echo "| server | put (s) | get (s) |"
	echo "|---|---:|---:|"
	awk '{ printf "| %s | %s | %s |\n", $1, $2, $3 }' "$work/times"
} >"$work/section"
section "$here/RESULTS.md" bench "$work/section"
echo "bench: wrote the throughput section of $here/RESULTS.md" >&2
