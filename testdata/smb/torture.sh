#!/bin/sh
# torture.sh — runs smbtorture's smb2 suites against plug smb and against
# Samba (Debian's 4.17, with acl_xattr and streams_xattr as a file server
# keeps them) on loopback, in the same run, and writes the table of
# subtests passed, failed and run per suite into RESULTS.md beside this
# script, with each subtest Samba passes and plug fails and why (from
# known-failures.txt when it names the subtest, else smbtorture's own
# message).
#
#   testdata/smb/torture.sh [SUITE...]    (as root: smbd needs it)
#
# Needs: go, smbd, smbpasswd, smbclient, smbtorture (testdata/smb/deps.sh
# installs them). Each suite runs against both servers at once, each run
# capped by `timeout` (TORTURE_TIMEOUT seconds, 600); a run the cap cuts
# is marked "cut" in the table. The session suite is counted without its
# bind* subtests, which need multichannel. Raw output: TORTURE_OUT
# (default testdata/smb/out, which git ignores); TORTURE_REPORT_ONLY=1
# writes the table again from it without running anything.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need smbtorture timeout

SUITES=${*:-"smb2.connect smb2.read smb2.rw smb2.lock smb2.credits smb2.tcon smb2.mkdir smb2.timestamps smb2.session smb2.ioctl smb2.compound smb2.dir smb2.getinfo smb2.setinfo smb2.create smb2.rename smb2.oplock smb2.lease smb2.durable-open smb2.durable-v2-open smb2.notify smb2.streams smb2.delete-on-close-perms"}
# Subtests left out of the count: multichannel is not offered.
EXCLUDE='^smb2\.session\.bind'
tab=$(printf '\t')

work=$(mktemp -d /tmp/plug-torture.XXXXXX)
trap 'servers_down; rm -rf "$work"' EXIT
out=${TORTURE_OUT:-$here/out}
mkdir -p "$out"

# run SERVER PORT SUITE writes OUT/SERVER-SUITE.subunit, and
# OUT/SERVER-SUITE.cut when the timeout ended the run.
run() {
	rm -f "$out/$1-$3.cut"
	rc=0
	timeout -k 10 "${TORTURE_TIMEOUT:-600}" smbtorture "//127.0.0.1/share" -p "$2" -U "$SMB_USER%$SMB_PASS" \
		--fullname --format=subunit "$3" >"$out/$1-$3.subunit" 2>&1 || rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		: >"$out/$1-$3.cut"
	fi
}

# With TORTURE_REPORT_ONLY set, the table is made again from the output
# of an earlier run.
if [ -z "${TORTURE_REPORT_ONLY:-}" ]; then
	servers_up "$work"
	for s in $SUITES; do
		echo "torture: $s" >&2
		run plug "$PLUG_PORT" "$s" &
		a=$!
		run samba "$SAMBA_PORT" "$s" &
		b=$!
		wait "$a" "$b"
	done
fi

# results FILE prints "NAME<TAB>RESULT" per subtest (names may hold
# spaces): success, failure, error, skip (xfail counts as failure); a run
# cut short by the timeout leaves the test it was in as "error".
results() {
	awk '
		function name(s) { sub(/^[a-z]+: /, "", s); sub(/ \[$/, "", s); return s }
		/^test: / { open[name($0)] = 1 }
		/^(success|successful|failure|error|skip|xfail|uxsuccess): / {
			r = $1; sub(":", "", r); n = name($0)
			if (r == "successful") r = "success"
			if (r == "xfail") r = "failure"
			if (r == "uxsuccess") r = "success"
			res[n] = r; delete open[n]
		}
		END {
			for (n in res) print n "\t" res[n]
			for (n in open) print n "\terror"
		}' "$1" | grep -Ev "$EXCLUDE" | sort
}

# count SERVER SUITE prints "passed failed" of SERVER's run of SUITE
# (skips are neither), each with "-cut" after it when the timeout ended
# the run.
count() {
	results "$out/$1-$2.subunit" >"$work/c"
	p=$(grep -c "$tab"'success$' "$work/c" || true)
	f=$(grep -Ec "$tab"'(failure|error)$' "$work/c" || true)
	c=
	if [ -f "$out/$1-$2.cut" ]; then c=-cut; fi
	echo "$p$c $f$c"
}

# why SUBTEST SUITE prints the reason it fails on plug: known-failures.txt's,
# else smbtorture's message (of a failure, or of the skip it was), else,
# when the timeout cut the run before it, that it was not reached.
why() {
	k=$(awk -v t="$1" -F '\t' '!/^#/ && $1 == t { print $2; exit }' "$here/known-failures.txt" 2>/dev/null || true)
	if [ -n "$k" ]; then
		echo "$k"
		return
	fi
	if [ -f "$out/plug-$2.cut" ] && ! grep -q "^test: $1\$" "$out/plug-$2.subunit"; then
		echo "not reached: the timeout cut the run before it"
		return
	fi
	awk -v t="$1" '
		index($0, "failure: " t " [") == 1 || index($0, "error: " t " [") == 1 || index($0, "skip: " t " [") == 1 {
			if ($1 == "skip:") printf "skipped: "
			on = 1; next
		}
		on && /^\]/ { exit }
		on { sub(/^[.\/]*source4\/torture\//, ""); print; n++; if (n == 2) exit }
	' "$out/plug-$2.subunit" | tr '\n' ' ' | tr '|' '/' | cut -c1-200
}

{
	echo "## smbtorture: plug smb and Samba, side by side"
	echo
	echo "Made by \`testdata/smb/torture.sh\` on $(date -u +%Y-%m-%d) with $(smbtorture --version 2>/dev/null | head -1)"
	echo "and Samba $(smbd --version | head -1 | sed 's/Version //'): both servers on loopback, each serving a fresh"
	echo "directory, signing required, the same user; Samba's share has"
	echo "\`vfs objects = acl_xattr streams_xattr\`. Each suite ran against both servers at once,"
	echo "each run capped by \`timeout\` (${TORTURE_TIMEOUT:-600} s; \"cut\" marks a run the cap ended)."
	echo "A subtest counts as passed when smbtorture reports it a success, as failed on a failure"
	echo "or error; the rest of the suite's subtests (as \`smbtorture --list\` names them) were"
	echo "skipped or not reached. smb2.session is counted without its bind* subtests (multichannel)."
	echo
	echo "| suite | plug passed | plug failed | Samba passed | Samba failed | subtests |"
	echo "|---|---:|---:|---:|---:|---:|"
	tp=0 tf=0 ts=0 tsf=0 tn=0
	for s in $SUITES; do
		results "$out/plug-$s.subunit" >"$work/p"
		results "$out/samba-$s.subunit" >"$work/s"
		# The suite's subtests as smbtorture lists them (a run cut short
		# leaves some out of its output), else those either run reported.
		n=$(smbtorture //127.0.0.1/share --list "$s" 2>/dev/null | grep "^$s\." | grep -Evc "$EXCLUDE" || true)
		[ "$n" -gt 0 ] || n=$(cut -f1 "$work/p" "$work/s" | sort -u | wc -l)
		set -- $(count samba "$s")
		sp=$1 sf=$2
		set -- $(count plug "$s")
		pp=$1 pf=$2
		tp=$((tp + ${pp%-cut})) tf=$((tf + ${pf%-cut})) ts=$((ts + ${sp%-cut})) tsf=$((tsf + ${sf%-cut})) tn=$((tn + n))
		echo "| $s | $pp | $pf | $sp | $sf | $n |" | sed 's/-cut/ (cut)/g'
	done
	echo "| **all** | **$tp** | **$tf** | **$ts** | **$tsf** | **$tn** |"
	echo
	echo "### Subtests Samba passes and plug does not"
	echo
	echo "| subtest | why |"
	echo "|---|---|"
	for s in $SUITES; do
		results "$out/plug-$s.subunit" >"$work/p"
		results "$out/samba-$s.subunit" >"$work/s"
		grep "$tab"'success$' "$work/s" | cut -f1 | while IFS= read -r t; do
			grep -qxF "$t${tab}success" "$work/p" && continue
			echo "| $t | $(why "$t" "$s") |"
		done
	done
} >"$work/section"
section "$here/RESULTS.md" torture "$work/section"
echo "torture: wrote the smbtorture section of $here/RESULTS.md (raw output in $out)" >&2
