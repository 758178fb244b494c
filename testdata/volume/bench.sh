#!/bin/sh
# bench.sh PROFILE KIND/NAME:VOLUME [MiB] — the throughput of a volume served
# by plug --volume, through the run's SSH connection, beside the same SMB
# server on loopback: smbclient puts and gets one file of MiB (default 1024)
# each way, and the rates are printed in MiB/s. Needs plug on PATH (or
# PLUG=path), smbclient, and a profile whose agent can serve the volume
# (testdata/volume/kube.yaml is such a workload). Nothing is timed as a test.
set -eu
profile=$1 spec=$2 mib=${3:-1024}
plug=${PLUG:-plug}
work=$(mktemp -d)
trap 'kill $run $loop 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

dd if=/dev/urandom of="$work/blob" bs=1M count="$mib" status=none

# rate PORT USER PASSWORD: "put MiB/s get MiB/s" for the share on 127.0.0.1:PORT.
rate() {
	for op in put get; do
		if [ $op = put ]; then cmd="put blob blob"; else cmd="get blob back"; fi
		start=$(date +%s.%N)
		(cd "$work" && smbclient //127.0.0.1/volume -p "$1" -U "$2%$3" -m SMB3 -c "$cmd" >/dev/null 2>&1)
		end=$(date +%s.%N)
		printf '%s %.0f MiB/s  ' $op "$(echo "$mib / ($end - $start)" | bc -l)"
	done
	cmp -s "$work/blob" "$work/back" || { echo "the file read back differs" >&2; exit 1; }
	rm -f "$work/back"
	echo
}

"$plug" -p "$profile" -v "$spec:$work/mnt" -- sleep 3600 2>"$work/plug.err" &
run=$!
i=0
until grep -q 'mount it with' "$work/plug.err"; do
	i=$((i + 1))
	[ $i -lt 600 ] || { cat "$work/plug.err" >&2; exit 1; }
	kill -0 $run 2>/dev/null || { cat "$work/plug.err" >&2; exit 1; }
	sleep 0.25
done
port=$(sed -n 's|.*smb://plug@127.0.0.1:\([0-9]*\)/volume.*|\1|p' "$work/plug.err" | head -1)
pass=$(sed -n 's|.*password=\([0-9a-f]*\).*|\1|p' "$work/plug.err" | head -1)
printf 'through plug --volume (%s): ' "$spec"
rate "$port" plug "$pass"
kill -INT $run; wait $run || true; run=

mkdir "$work/share"
PLUG_SMB_USER=bench PLUG_SMB_PASSWORD=bench-password "$plug" smb --addr 127.0.0.1:0 --share volume "$work/share" 2>"$work/smb.err" &
loop=$!
until grep -q 'serving' "$work/smb.err"; do sleep 0.1; done
lport=$(sed -n 's|.* on 127.0.0.1:\([0-9]*\)$|\1|p' "$work/smb.err")
printf 'plug smb on loopback:          '
rate "$lport" bench bench-password
