#!/bin/sh
# torture.sh — runs smbtorture's smb2 suites against plug smb and against
# Samba (Debian's 4.17) on loopback, in the same run, and writes the table
# of subtests passed per suite into RESULTS.md beside this script, with
# each subtest Samba passes and plug fails and why (from known-failures.txt
# when it names the subtest, else smbtorture's own message).
#
#   testdata/smb/torture.sh [SUITE...]    (as root: smbd needs it)
#
# Needs: go, smbd, smbpasswd, smbclient, smbtorture
#   apt-get install -y --no-install-recommends smbclient samba samba-testsuite
# Each suite run is capped by `timeout` (TORTURE_TIMEOUT seconds, 600).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need smbtorture timeout

SUITES=${*:-"smb2.connect smb2.read smb2.rw smb2.lock smb2.credits smb2.tcon smb2.mkdir smb2.timestamps smb2.maxfid smb2.getinfo smb2.dir smb2.create smb2.rename smb2.session smb2.compound smb2.ioctl"}
work=$(mktemp -d /tmp/plug-torture.XXXXXX)
trap 'servers_down; rm -rf "$work"' EXIT
servers_up "$work"
out=$here/out
mkdir -p "$out"

# run SERVER PORT SUITE writes OUT/SERVER-SUITE.subunit.
run() {
	timeout "${TORTURE_TIMEOUT:-600}" smbtorture "//127.0.0.1/share" -p "$2" -U "$SMB_USER%$SMB_PASS" \
		--fullname --format=subunit "$3" >"$out/$1-$3.subunit" 2>&1 || true
}

for s in $SUITES; do
	echo "torture: $s" >&2
	run plug "$PLUG_PORT" "$s"
	run samba "$SAMBA_PORT" "$s"
done

# results FILE prints "NAME RESULT" per subtest: success, failure, error,
# skip (xfail counts as failure); a run cut short by the timeout leaves the
# test it was in as "error".
results() {
	awk '
		/^test: / { cur = $2; open[cur] = 1 }
		/^(success|successful|failure|error|skip|xfail|uxsuccess): / {
			r = $1; sub(":", "", r); n = $2
			if (r == "successful") r = "success"
			if (r == "xfail") r = "failure"
			if (r == "uxsuccess") r = "success"
			res[n] = r; delete open[n]
		}
		END {
			for (n in res) print n, res[n]
			for (n in open) print n, "error"
		}' "$1" | sort
}

# why SUBTEST prints the reason it fails on plug.
why() {
	k=$(awk -v t="$1" -F '\t' '!/^#/ && $1 == t { print $2; exit }' "$here/known-failures.txt" 2>/dev/null || true)
	if [ -n "$k" ]; then
		echo "$k"
		return
	fi
	awk -v t="$1" '
		$0 ~ "^(failure|error): " t " \\[" { on = 1; next }
		on && /^\]/ { exit }
		on { sub(/^[.\/]*source4\/torture\//, ""); print; n++; if (n == 2) exit }
	' "$out/plug-$2.subunit" | tr '\n' ' ' | tr '|' '/' | cut -c1-200
}

{
	echo "## smbtorture: plug smb and Samba, side by side"
	echo
	echo "Made by \`testdata/smb/torture.sh\` on $(date -u +%Y-%m-%d) with $(smbtorture --version 2>/dev/null | head -1)"
	echo "and Samba $(smbd --version | head -1 | sed 's/Version //'): both servers on loopback, each serving a fresh"
	echo "directory, signing required, the same user; every suite run capped by \`timeout\`."
	echo "A subtest counts as passed when smbtorture reports it a success."
	echo
	echo "| suite | plug passed | Samba passed | subtests |"
	echo "|---|---:|---:|---:|"
	tp=0 ts=0 tn=0
	for s in $SUITES; do
		results "$out/plug-$s.subunit" >"$work/p"
		results "$out/samba-$s.subunit" >"$work/s"
		sort -u -k1,1 "$work/p" "$work/s" | cut -d' ' -f1 >"$work/all"
		n=$(wc -l <"$work/all")
		p=$(grep -c ' success$' "$work/p" || true)
		sa=$(grep -c ' success$' "$work/s" || true)
		tp=$((tp + p)) ts=$((ts + sa)) tn=$((tn + n))
		echo "| $s | $p | $sa | $n |"
	done
	echo "| **all** | **$tp** | **$ts** | **$tn** |"
	echo
	echo "### Subtests Samba passes and plug does not"
	echo
	echo "| subtest | why |"
	echo "|---|---|"
	for s in $SUITES; do
		results "$out/plug-$s.subunit" >"$work/p"
		results "$out/samba-$s.subunit" >"$work/s"
		grep ' success$' "$work/s" | cut -d' ' -f1 | while read -r t; do
			grep -qx "$t success" "$work/p" && continue
			echo "| $t | $(why "$t" "$s") |"
		done
	done
} >"$work/section"
section "$here/RESULTS.md" torture "$work/section"
echo "torture: wrote the smbtorture section of $here/RESULTS.md (raw output in $out)" >&2
