#!/bin/sh
# down.sh — undoes up.sh: removes every service, leaves the swarm, stops
# dockerd and its containerd, and removes what they left on the machine
# (mounts, bridges, iptables rules and chains, changed sysctls) and the guard.
# Then it compares links, netns, the nftables ruleset, the iptables rules and
# the sysctls with the snapshot up.sh took before changing anything, and
# fails printing the differences. Images stay cached in /var/lib/docker.
# Running it when the swarm is down does nothing.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start=$(date +%s.%N)

[ "$(id -u)" = 0 ] || die "run me as root"
if [ ! -d "$STATE" ]; then
	say "not up (no $STATE): nothing to do"
	exit 0
fi

# stop PIDFILE NAME ends the process PIDFILE names, politely first.
stop() {
	alive "$1" || { rm -f "$1"; return 0; }
	pid=$(cat "$1")
	kill -TERM "$pid"
	i=0
	while running "$pid" && [ $i -lt 200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	if running "$pid"; then
		say "$2 (pid $pid) ignored SIGTERM for 20s; killing it"
		kill -KILL "$pid"
	fi
	rm -f "$1"
}

# kill_tasks ends what dockerd left in our containerd: a container it was
# starting when it was killed, say.
kill_tasks() {
	alive "$STATE/containerd.pid" || return 0
	ctr="ctr --address $CONTAINERD_SOCK --namespace moby"
	for id in $($ctr containers ls -q); do
		$ctr tasks delete --force "$id" >/dev/null 2>&1 || :
		$ctr containers delete "$id" >/dev/null 2>&1 || :
	done
}

# kill_orphan_shims ends the shims of our containerd, and their containers,
# when that containerd was killed before it could.
kill_orphan_shims() {
	for pid in $(leftovers | awk '$2 ~ /containerd-shim/ {print $1}'); do
		kill -KILL $(pgrep -P "$pid") "$pid" 2>/dev/null || :
	done
	i=0
	while [ -n "$(leftovers)" ] && [ $i -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
}

# leftovers prints our processes that still run: dockerd, docker-proxy and
# anything started with our containerd's socket (containerd, its shims).
leftovers() {
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		case $cmd in
		dockerd* | /usr/sbin/dockerd* | /usr/sbin/docker-proxy* | *"$CONTAINERD_SOCK"*) echo "${p#/proc/} $cmd" ;;
		esac
	done
}

# unmount_all unmounts what dockerd and containerd left mounted.
unmount_all() {
	docker_mounts | while read -r m; do
		grep -qxF "$m" "$STATE/before/mounts" || umount "$m" 2>/dev/null || umount -l "$m"
	done
}

# remove_links deletes Docker's bridges (dockerd leaves them when it stops),
# VXLAN links and veths still enslaved to those bridges.
remove_links() {
	bridges=$(ip -o link show | awk '{n = $2; sub(/:$/, "", n); sub(/@.*/, "", n)}
		n == "docker0" || n == "docker_gwbridge" || (n ~ /^br-[0-9a-f]+$/ && length(n) == 15) || n ~ /^vx-/ {print n}')
	for b in $bridges; do
		for v in $(ip -o link show master "$b" 2>/dev/null | awk '{n = $2; sub(/:$/, "", n); sub(/@.*/, "", n); print n}'); do
			ip link del "$v" 2>/dev/null || :
		done
		ip link del "$b" 2>/dev/null || :
	done
}

# clean_iptables FAMILY (iptables or ip6tables) deletes the rules that jump to
# Docker's chains or name its bridges and addresses, then those chains, puts
# FORWARD's policy back and drops tables that Docker alone created.
clean_iptables() {
	t=$1
	command -v $t-save >/dev/null || return 0
	$t-save | undo_chains DOCKER 'docker0|docker_gwbridge|br-[0-9a-f]+|198[.]19[.]' >"$STATE/$t.undo"
	[ ! -s "$STATE/$t.undo" ] || $t-restore --noflush <"$STATE/$t.undo"

	before=$STATE/before/$t
	family=ip
	[ $t = iptables ] || family=ip6
	policy=$(awk '/^\*/ { tb = $1 } tb == "*filter" && /^:FORWARD / { print $2 }' "$before")
	if $t-save | grep -q '^\*filter'; then
		$t -P FORWARD "${policy:-ACCEPT}"
	fi
	# A table absent before, now holding only empty built-in chains that
	# accept, is one Docker created.
	$t-save | awk '
	/^\*/ { tb = substr($1, 2); keep = 0; next }
	/^:/ { if ($1 !~ /^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING)$/ || $2 != "ACCEPT") keep = 1; next }
	/^-A / { keep = 1; next }
	/^COMMIT/ { if (!keep) print tb }' | while read -r tb; do
		grep -qx "\*$tb" "$before" || nft delete table $family "$tb"
	done
}

# remove_shim_sockets removes the sockets that shims of our containerd left
# (when they were killed) in /run/containerd/s, where every containerd's
# shims put theirs, each named by the hash of containerd's socket, namespace
# and container. /run/containerd goes too if it is empty and was not there
# before up.sh.
remove_shim_sockets() {
	for bundle in "$STATE"/containerd/io.containerd.runtime.v2.task/moby/*; do
		[ -d "$bundle" ] || continue
		hash=$(printf '%s' "$CONTAINERD_SOCK/moby/${bundle##*/}" | sha256sum | cut -d' ' -f1)
		rm -f "/run/containerd/s/$hash"
	done
	[ ! -e "$STATE/before/no-run-containerd" ] || rmdir /run/containerd/s /run/containerd 2>/dev/null || :
}

# restore_sysctls writes back the sysctls dockerd changes (IP forwarding,
# the neighbour table sizes of the overlay driver, bridge netfilter) where
# they differ from the snapshot, net.ipv4.ip_forward first (it resets the
# forwarding of every interface). Others that differ are someone else's: the
# comparison reports them. IP forwarding stays on while the Kubernetes
# harness runs: its pods need it too.
restore_sysctls() {
	ours='ipv4\.neigh\.default\.gc_thresh[123]|bridge\.bridge-nf-call-[a-z0-9]+'
	[ -f "$ENV_DIR/kube.env" ] || ours="$ours|ipv4\.ip_forward|ipv4\.conf\.[^.]+\.forwarding"
	sysctls | grep -E "^net\.($ours) " | awk -F ' = ' '
	FNR == NR { old[$1] = substr($0, length($1) + 4); next }
	($1 in old) && substr($0, length($1) + 4) != old[$1] { print ($1 == "net.ipv4.ip_forward" ? 0 : 1) "\t" $1 }' \
		"$STATE/before/sysctl" - | sort | cut -f2 | while read -r key; do
		want=$(awk -F ' = ' -v k="$key" '$1 == k { print substr($0, length(k) + 4); exit }' "$STATE/before/sysctl")
		[ "$(sysctls | awk -F ' = ' -v k="$key" '$1 == k { print substr($0, length(k) + 4) }')" != "$want" ] || continue
		say "restoring $key = $want"
		(printf '%s\n' "$want" >"/proc/sys/$(echo "$key" | tr . /)") 2>/dev/null ||
			say "cannot write $key back"
	done
}

alive "$STATE/dockerd.pid" && remove_workloads
stop "$STATE/dockerd.pid" dockerd
kill_tasks
stop "$STATE/containerd.pid" containerd
kill_orphan_shims
rest=$(leftovers)
[ -z "$rest" ] || die "still running after dockerd and containerd stopped:
$rest"
[ ! -f "$STATE/before/mounts" ] || unmount_all
remove_links
for t in iptables ip6tables; do clean_iptables $t; done
nft delete table inet "$GUARD_TABLE" 2>/dev/null || :
[ ! -f "$STATE/before/sysctl" ] || restore_sysctls

remove_shim_sockets
rm -rf "$EXEC_ROOT" "$STATE/containerd" "$CONF" /var/run/docker.sock "$ENV_FILE"
rmdir /etc/plug-test 2>/dev/null || :

if [ ! -d "$STATE/before" ]; then
	rm -rf "$STATE"
	say "down in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s (no snapshot to compare with)"
	exit 0
fi
rm -rf "$STATE/after"
snapshot "$STATE/after"
if ! compare "$STATE/before" "$STATE/after"; then
	rm -rf "$STATE.failed"
	mv "$STATE" "$STATE.failed"
	die "the machine differs from before up.sh (above); snapshots kept in $STATE.failed.
(Did something start after up.sh? The Kubernetes harness comes up before the swarm and goes down after it.)"
fi
rm -rf "$STATE"
say "down in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s; machine as before up.sh"
