# harness.sh — what the harnesses of testdata/cluster and testdata/swarm
# share. Sourced by their lib.sh, after die is defined; not run.

# wait_for SECONDS WHAT CMD... polls CMD every 0.1 s until it succeeds, and
# dies saying WHAT is not ready after SECONDS.
wait_for() {
	limit=$1 what=$2
	shift 2
	deadline=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || die "$what: not ready after ${limit}s"
		sleep 0.1
	done
}

# undo_chains PATTERN [ALSO] reads iptables-save output and prints the
# iptables-restore --noflush input that takes out what a harness added to
# every table: the rules of other chains that jump to a chain whose name
# matches PATTERN (an awk regular expression, e.g. "(CNI|KUBE)-") or that
# match ALSO, then those chains themselves (flushed, then deleted).
undo_chains() {
	awk -v pattern="$1" -v also="${2-}" '
	/^\*/ { table = $0; n = 0; out = ""; next }
	/^:/ { c = substr($1, 2); if (c ~ ("^" pattern)) chains[++n] = c; next }
	/^-A / {
		if ($2 !~ ("^" pattern) && ($0 ~ (" -[jg] " pattern) || also != "" && $0 ~ also)) {
			sub(/^-A /, "-D "); out = out $0 "\n"
		}
		next
	}
	/^COMMIT/ {
		if (out == "" && n == 0) next
		print table; printf "%s", out
		for (i = 1; i <= n; i++) print "-F " chains[i]
		for (i = 1; i <= n; i++) print "-X " chains[i]
		print "COMMIT"
	}'
}
