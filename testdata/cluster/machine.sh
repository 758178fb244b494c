# machine.sh — the machine's state that the cluster touches: up.sh records
# it before starting anything, down.sh restores what it can and compares.
# Sourced after lib.sh, not run.
#
# Docker (the Swarm harness of testdata/swarm) may start or stop while the
# cluster runs. Its own interfaces, chains, rules, tables and its need for IP
# forwarding are left out of the comparison; the intended order is still
# kube up, swarm up, swarm down, kube down.

# Prefixes of mount points the cluster creates.
MOUNT_PREFIXES="/var/lib/plug-test/ /run/plug-test/ /var/lib/kubelet/ /run/netns/ /var/run/netns/ /run/containerd/"

# snapshot DIR records everything the comparison looks at.
snapshot() {
	mkdir -p "$1"
	ip -o link show >"$1/link" 2>/dev/null
	ip netns list >"$1/netns"
	nft -s list ruleset >"$1/nft" 2>/dev/null
	iptables-save >"$1/iptables"
	ip6tables-save >"$1/ip6tables"
	for s in $SYSCTLS; do
		echo "$s=$(sysctl -n "$s" 2>/dev/null || echo absent)"
	done >"$1/sysctl"
	for d in $FOREIGN_DIRS; do
		[ ! -e "$d" ] || echo "$d"
	done >"$1/dirs"
	mount_table >"$1/mounts"
	find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d | sort >"$1/cgroups"
}

# our_mounts prints the mount points under MOUNT_PREFIXES, one line per
# mount: a mount point with another stacked on it is printed twice.
our_mounts() { mount_table | cut -d' ' -f1; }

# mount_table prints each mount under MOUNT_PREFIXES with its propagation
# (shared, private...): a bind mount of /run/netns onto itself that hides
# the pods' namespace mounts shows as a second line for it.
mount_table() {
	findmnt -rn -o TARGET,PROPAGATION | while read -r m prop; do
		for p in $MOUNT_PREFIXES; do
			case $m/ in "$p"*)
				echo "$m $prop"
				break
				;;
			esac
		done
	done | sort
}

docker_running() { pidof dockerd >/dev/null 2>&1; }

# norm_link prints name, flags and master of each interface, leaving out
# Docker's: its bridges, what is enslaved to them, and its veths (named veth
# and 7 hex digits; the CNI bridge plugin uses 8).
norm_link() {
	awk '{
		n = $2; sub(/:$/, "", n); sub(/@.*/, "", n)
		m = ""
		for (i = 3; i < NF; i++) if ($i == "master") m = $(i + 1)
		docker = "^(docker0|docker_gwbridge|br-[0-9a-f]+|vx-.*)$"
		if (n ~ docker || m ~ docker || n ~ /^veth[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]$/) next
		print n, $3, (m == "" ? "" : "master " m)
	}' "$1" | sort
}

norm_netns() { sed 's/ (id: [0-9]*)//' "$1" | sort; }

# norm_nft prints the native nftables tables. Tables iptables-nft manages are
# compared through iptables-save; the Swarm harness's guard is not ours.
norm_nft() {
	awk '
	skip { if ($0 ~ /^}/) skip = 0; next }
	/^table (ip|ip6) (filter|nat|mangle|raw|security) \{/ { skip = 1; next }
	/^table (arp|bridge) / { skip = 1; next }
	/^table inet plug_swarm_/ { skip = 1; next }
	{ print }' "$1"
}

# norm_iptables prints the rules without counters and without Docker's
# chains and rules. A table holding nothing but empty accepting built-in
# chains counts as absent. When Docker ran at either snapshot (DOCKER_SEEN),
# FORWARD's policy is its.
norm_iptables() {
	awk -v docker="${DOCKER_SEEN:-false}" '
	/^#/ { next }
	/^\*/ { table = $0; n = 0; used = 0; next }
	/^:/ {
		if ($1 ~ /^:DOCKER/) next
		if (docker == "true" && table == "*filter" && $1 == ":FORWARD") $2 = "(docker)"
		else if ($1 !~ /^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING)$/ || $2 != "ACCEPT") used = 1
		chains[++n] = $1 " " $2
		next
	}
	/^-A / {
		if ($0 ~ /DOCKER|docker0|docker_gwbridge|br-[0-9a-f]+|198\.19\./) next
		used = 1
		rules[++n] = $0
		next
	}
	/^COMMIT/ {
		if (used) { print table; for (i = 1; i <= n; i++) print (i in chains ? chains[i] : rules[i]); print "COMMIT" }
		delete chains; delete rules
	}' "$1"
}

# norm_sysctl leaves out IP forwarding while dockerd runs: it needs it on.
norm_sysctl() {
	if docker_running; then
		grep -Ev '^net\.ipv4\.(ip_forward|conf\.all\.forwarding)=' "$1"
	else
		cat "$1"
	fi
}

norm_dirs() { cat "$1"; }
norm_mounts() { cat "$1"; }
norm_cgroups() { grep -Ev '/docker$' "$1"; }

# compare BEFORE AFTER prints every difference between two snapshots and
# fails if there is one.
compare() {
	rc=0
	DOCKER_SEEN=false
	! grep -qs '^:DOCKER' "$1/iptables" "$2/iptables" || DOCKER_SEEN=true
	for kind in link netns nft iptables ip6tables sysctl dirs mounts cgroups; do
		norm=norm_$kind
		[ "$kind" != ip6tables ] || norm=norm_iptables
		$norm "$1/$kind" >"$2/$kind.before"
		$norm "$2/$kind" >"$2/$kind.after"
		if ! diff -u --label "$kind before up.sh" --label "$kind after down.sh" \
			"$2/$kind.before" "$2/$kind.after" >&2; then
			rc=1
		fi
	done
	return $rc
}

# restore_sysctls BEFORE writes back every recorded sysctl that changed,
# except IP forwarding while dockerd needs it.
restore_sysctls() {
	norm_sysctl "$1/sysctl" | while IFS== read -r key want; do
		[ "$want" != absent ] || continue
		[ "$(sysctl -n "$key" 2>/dev/null)" != "$want" ] || continue
		sysctl -q -w "$key=$want" || say "cannot restore $key=$want"
	done
}

# restore_dirs BEFORE removes the directories the node created outside its
# own, when they did not exist before. /run/containerd is shared with other
# containerd daemons: only its empty parts go.
restore_dirs() {
	for d in $FOREIGN_DIRS; do
		grep -qx "$d" "$1/dirs" && continue
		case $d in
		/run/containerd) rmdir /run/containerd/s /run/containerd 2>/dev/null || true ;;
		/var/run/netns) rmdir "$d" 2>/dev/null || true ;;
		*) rm -rf "$d" ;;
		esac
	done
}
