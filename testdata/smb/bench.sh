#!/bin/sh
# bench.sh — throughput of plug smb next to Samba (Debian's 4.17), in the
# same run on loopback: smbclient puts and gets a 1 GiB file, and a directory
# of 10,000 files of 1 KiB (mput and mget, recursive), over SMB 3.1.1 with
# signing required, ROUNDS times against each server in turn, and the
# medians and their ratio go into RESULTS.md beside this script. Shares and
# the local files sit in /dev/shm, so that the disk is not what is measured.
#
#   testdata/smb/bench.sh [ROUNDS]     (as root: smbd needs it; default 3)
#
# PLUG_PORT and SAMBA_PORT choose the servers' ports (see lib.sh).
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
# many: 100 directories of 100 files of 1 KiB.
files=10000
mkdir "$work/many"
for d in $(seq 100); do
	mkdir "$work/many/d$d"
	for f in $(seq 100); do
		head -c 1024 /dev/urandom >"$work/many/d$d/f$f"
	done
done

# seconds CMD... runs CMD and prints how long it took.
seconds() {
	s=$(date +%s.%N)
	"$@" >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
	e=$(date +%s.%N)
	echo "$s $e" | awk '{ printf "%.3f\n", $2 - $1 }'
}

# cpu PID is the CPU time, in clock ticks, that PID and its children it
# has reaped have used: Samba's smbd serves each connection from a child.
cpu() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"; }

# reaped PID waits (up to 5 s) until PID has no more children than it had
# at the start, so that the child that served a connection is counted.
reaped() {
	i=0
	while [ "$(pgrep -c -P "$1")" -gt "$2" ] && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
}

# timed SERVER CMD prints the wall time of client CMD against SERVER's
# port, and adds the CPU time the server spent on it to $work/cpu.
timed() {
	c0=$(cpu "$pid")
	seconds client "$port" "$1"
	reaped "$pid" "$kids"
	echo $(($(cpu "$pid") - c0)) >>"$work/cpu"
}

client() {
	(cd "$work" && smbclient -s /dev/null //127.0.0.1/share -p "$1" -U "$SMB_USER%$SMB_PASS" \
		--option=clientmaxprotocol=SMB3_11 --option=clientsigning=required -c "$2")
}

: >"$work/times"
for r in $(seq "$rounds"); do
	for server in plug samba; do
		port=$PLUG_PORT pid=$PLUG_PID
		[ "$server" = samba ] && port=$SAMBA_PORT pid=$SAMBA_PID
		kids=$(pgrep -c -P "$pid" || true)
		: >"$work/cpu"
		put=$(timed "put big.bin")
		get=$(timed "get big.bin back.bin")
		cmp -s "$work/big.bin" "$work/back.bin" || { echo "$0: $server returned other bytes" >&2; exit 1; }
		rm -f "$work/back.bin"
		client "$port" "rm big.bin" >/dev/null
		mput=$(timed "prompt off; recurse on; mput many")
		rm -rf "$work/back" && mkdir "$work/back"
		mget=$(timed "prompt off; recurse on; lcd back; mget many")
		diff -r "$work/many" "$work/back/many" >/dev/null || { echo "$0: $server returned other files" >&2; exit 1; }
		rm -rf "$work/back"
		client "$port" "deltree many" >/dev/null
		cpus=$(awk -v hz="$(getconf CLK_TCK)" '{ printf " %.2f", $1 / hz }' "$work/cpu")
		echo "$server $put $get $mput $mget$cpus" >>"$work/times"
		echo "bench: round $r $server: put ${put}s get ${get}s; 10,000 files: put ${mput}s get ${mget}s; server CPU (s):$cpus" >&2
	done
done

# median SERVER FIELD is the median of a column of times (2: put, 3: get,
# 4: put of the 10,000 files, 5: their get; 6 to 9: the server's CPU time
# in each).
median() {
	awk -v s="$1" -v f="$2" '$1 == s { print $f }' "$work/times" | sort -n |
		awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
mbs() { awk -v t="$1" -v n="$size" 'BEGIN { printf "%.0f", n / t / 1048576 }'; }
fps() { awk -v t="$1" -v n="$files" 'BEGIN { printf "%.0f", n / t }'; }
# ratio PLUG SAMBA is how many times faster plug was.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f×", b / a }'; }

pp=$(median plug 2) pg=$(median plug 3) sp=$(median samba 2) sg=$(median samba 3)
pm=$(median plug 4) pn=$(median plug 5) sm=$(median samba 4) sn=$(median samba 5)
# cpurow LABEL FIELD is a row of the servers' median CPU times in FIELD.
cpurow() {
	a=$(median plug "$2") b=$(median samba "$2")
	echo "| $1 | ${a} s | ${b} s | $(ratio "$a" "$b") |"
}
{
	echo "## Throughput: plug smb and Samba, side by side"
	echo
	echo "Made by \`testdata/smb/bench.sh $rounds\` on $(date -u +%Y-%m-%d): smbclient $(smbclient --version | sed 's/Version //')"
	echo "puts and gets a 1 GiB file, and a directory of 10,000 files of 1 KiB (100 directories of 100;"
	echo "mput and mget, recursive), over SMB 3.1.1 with signing required (AES-128-GMAC), on loopback,"
	echo "$rounds rounds against each server in turn; shares and the local files in /dev/shm. Medians;"
	echo "the rates are 1 GiB or 10,000 files over the wall time of the smbclient command (connect and"
	echo "log on included). The machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
	echo
	echo "| | plug | Samba $(smbd --version | sed 's/Version //') | plug ÷ Samba |"
	echo "|---|---:|---:|---:|"
	echo "| put 1 GiB | $(mbs "$pp") MiB/s (${pp} s) | $(mbs "$sp") MiB/s (${sp} s) | $(ratio "$pp" "$sp") |"
	echo "| get 1 GiB | $(mbs "$pg") MiB/s (${pg} s) | $(mbs "$sg") MiB/s (${sg} s) | $(ratio "$pg" "$sg") |"
	echo "| put 10,000 files | $(fps "$pm") files/s (${pm} s) | $(fps "$sm") files/s (${sm} s) | $(ratio "$pm" "$sm") |"
	echo "| get 10,000 files | $(fps "$pn") files/s (${pn} s) | $(fps "$sn") files/s (${sn} s) | $(ratio "$pn" "$sn") |"
	cpurow "server CPU time, put 1 GiB" 6
	cpurow "server CPU time, get 1 GiB" 7
	cpurow "server CPU time, put 10,000 files" 8
	cpurow "server CPU time, get 10,000 files" 9
	echo
	echo "The server's CPU time (user and system, of smbd's connection process too) does not"
	echo "depend on what else the machine runs, as the wall time does. In every row the ratio is"
	echo "Samba's time over plug's: above 1, plug is the faster, or spends less."
	echo
	echo "Every round:"
	echo
	echo "| server | put (s) | get (s) | put 10,000 files (s) | get 10,000 files (s) | CPU: put, get, put 10,000, get 10,000 (s) |"
	echo "|---|---:|---:|---:|---:|---:|"
	awk '{ printf "| %s | %s | %s | %s | %s | %s, %s, %s, %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' "$work/times"
} >"$work/section"
section "$here/RESULTS.md" bench "$work/section"
echo "bench: wrote the throughput section of $here/RESULTS.md" >&2
