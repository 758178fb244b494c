# lib.sh — what up.sh and down.sh share: where things live, and the snapshot
# of the machine's network state that down.sh compares against. Sourced, not run.

DOCKER=/usr/bin/docker # Debian's CLI: the one that matches dockerd 20.10
ENV_DIR=${PLUG_TEST_ENV_DIR:-/run/plug-test}
ENV_FILE=$ENV_DIR/swarm.env
STATE=/run/plug-test/swarm        # pids, logs, the snapshot
CONF=/etc/plug-test/docker        # daemon.json and containerd.toml, written by up.sh
CACHE=${PLUG_TEST_CACHE:-/var/cache/plug-test}
DATA_ROOT=/var/lib/docker
EXEC_ROOT=/run/docker
CONTAINERD_SOCK=$STATE/containerd.sock
GUARD_TABLE=plug_swarm_guard

SWARM_NETWORK=plugnet
WORKLOAD_IMAGE=plug-test/workload:1
PLUG_IMAGE=plug:dev

# Our address ranges, all inside 198.19.0.0/16.
BRIDGE_IP=198.19.0.1/24         # docker0
GWBRIDGE_SUBNET=198.19.1.0/24   # docker_gwbridge
LOCAL_POOL=198.19.16.0/20       # networks `docker network create` makes, /24 each
SWARM_POOL=198.19.128.0/17      # ingress and overlay networks, /24 each

export DOCKER_HOST=unix:///var/run/docker.sock

say() { echo "swarm: $*" >&2; }
die() {
	say "$*"
	exit 1
}

# wait_for, undo_chains
. "$(cd "$(dirname "$0")/.." && pwd)/harness.sh"

# running PID succeeds when process PID runs (a zombie does not).
running() {
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$state" ] && [ "$state" != Z ]
}

# alive PIDFILE succeeds when the process named in PIDFILE runs.
alive() {
	[ -s "$1" ] && running "$(cat "$1")"
}

# remove_workloads asks dockerd to remove every service, container and
# network and to leave the swarm. What a hung dockerd leaves is dealt with
# once it is stopped.
remove_workloads() {
	services=$($DOCKER service ls -q 2>/dev/null) || :
	[ -z "$services" ] || $DOCKER service rm $services >/dev/null || :
	$DOCKER swarm leave --force >/dev/null 2>&1 || :
	containers=$($DOCKER ps -aq 2>/dev/null) || :
	[ -z "$containers" ] || $DOCKER rm -f $containers >/dev/null || :
	$DOCKER network prune -f >/dev/null || :
}

# uplinks prints the interfaces that default routes leave through.
uplinks() {
	ip -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}' | sort -u
}

# snapshot DIR records what the comparison looks at: links, netns, the
# nftables ruleset, the iptables rules, the sysctls and Docker's mounts.
snapshot() {
	mkdir -p "$1"
	ip -o link show >"$1/link"
	ip netns list >"$1/netns" 2>/dev/null || :
	if command -v nft >/dev/null; then nft list ruleset >"$1/nft" 2>/dev/null; else : >"$1/nft"; fi
	for t in iptables ip6tables; do
		if command -v $t-save >/dev/null; then $t-save >"$1/$t"; else : >"$1/$t"; fi
	done
	sysctls >"$1/sysctl"
	docker_mounts >"$1/mounts"
}

# docker_mounts prints the mount points at or under the directories dockerd
# and containerd use, deepest first. (dockerd bind-mounts its data root on
# itself, and unmounts it only when it shuts down cleanly.)
docker_mounts() {
	findmnt -rn -o TARGET | awk -v a="$DATA_ROOT" -v b="$EXEC_ROOT" -v c="$STATE" '
	function at(dir) { return $0 == dir || index($0, dir "/") == 1 }
	at(a) || at(b) || at(c)' | sort -r
}

# sysctls prints "key = value" for every sysctl, once: a key that sysctl -a
# lists several times gets its values joined with "|".
sysctls() {
	sysctl -a 2>/dev/null | awk -F ' = ' '
	{ k = $1; v = substr($0, length(k) + 4) }
	k in val { val[k] = val[k] "|" v; next }
	{ val[k] = v; order[++n] = k }
	END { for (i = 1; i <= n; i++) print order[i] " = " val[order[i]] }'
}

# Things others own that change while the swarm runs, left out of the
# comparison: the Kubernetes harness (CNI pod netns, per-pod CNI-* iptables
# chains, kube-proxy's own nftables tables, veths of pods on its bridge) and
# counters. Tables iptables-nft manages are compared through iptables-save.
IPTABLES_TABLES='filter|nat|mangle|raw|security'
IGNORED_NFT_TABLES="ip ($IPTABLES_TABLES)|ip6 ($IPTABLES_TABLES)|ip kube-proxy|ip6 kube-proxy"
VOLATILE_SYSCTLS='^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\.)|kernel\.(ns_last_pid|random\.|pty\.nr)|net\.netfilter\.nf_conntrack_count)'
PER_IF_SYSCTLS='^net\.ipv[46]\.(conf|neigh)\.'

# norm_link BEFORE_DIR FILE prints one line per link: name, flags, master.
# Links enslaved to a bridge that was there before are someone else's. The
# carrier flags come and go with what is plugged into a bridge.
norm_link() {
	awk -v before="$1/link" '
	BEGIN {
		while ((getline l < before) > 0) { split(l, f, " "); n = f[2]; sub(/:$/, "", n); sub(/@.*/, "", n); old[n] = 1 }
	}
	{
		n = $2; sub(/:$/, "", n); sub(/@.*/, "", n)
		m = ""
		for (i = 3; i < NF; i++) if ($i == "master") m = $(i + 1)
		if (m != "" && (m in old)) next
		fl = $3; gsub(/(NO-CARRIER|LOWER_UP|M-DOWN|DORMANT),?/, "", fl); sub(/,>/, ">", fl)
		print n, fl, (m == "" ? "" : "master " m)
	}' "$2" | sort
}

norm_netns() { grep -v '^cni-' "$1" | sed 's/ (id: [0-9]*)//' | sort; }

norm_nft() {
	awk -v ignored="^($IGNORED_NFT_TABLES)\$" '
	skip { if ($0 ~ /^}/) skip = 0; next }
	/^table / { if (($2 " " $3) ~ ignored) { skip = 1; next } }
	/^[ \t]*# Warning/ { next }
	{ gsub(/counter packets [0-9]+ bytes [0-9]+/, "counter"); print }' "$1"
}

norm_iptables() { grep -v -e '^#' -e 'CNI-' "$1" | sed 's/\[[0-9]*:[0-9]*\]/[-]/'; }

norm_sysctl() { grep -Ev "$VOLATILE_SYSCTLS" "$1" | sort; }

# compare BEFORE_DIR AFTER_DIR prints every difference and fails if any.
compare() {
	rc=0
	for what in link netns nft iptables ip6tables sysctl mounts; do
		case $what in
		link) norm_link "$1" "$1/link" >"$2/$what.before"; norm_link "$1" "$2/link" >"$2/$what.after" ;;
		sysctl) sysctl_common "$1/sysctl" "$2/sysctl" >"$2/$what.before"
			sysctl_common "$2/sysctl" "$1/sysctl" >"$2/$what.after" ;;
		mounts) cp "$1/$what" "$2/$what.before"; cp "$2/$what" "$2/$what.after" ;;
		ip6tables) norm_iptables "$1/$what" >"$2/$what.before"; norm_iptables "$2/$what" >"$2/$what.after" ;;
		*) norm_$what "$1/$what" >"$2/$what.before"; norm_$what "$2/$what" >"$2/$what.after" ;;
		esac
		if ! diff -u --label "$what before up.sh" --label "$what after down.sh" \
			"$2/$what.before" "$2/$what.after" >"$2/$what.diff"; then
			cat "$2/$what.diff" >&2
			rc=1
		fi
	done
	return $rc
}

# sysctl_common A B prints A's sysctls, leaving out per-interface keys of
# interfaces B lacks (the link comparison reports those interfaces).
sysctl_common() {
	norm_sysctl "$2" | cut -d' ' -f1 >"$2.keys"
	norm_sysctl "$1" | awk -v per="$PER_IF_SYSCTLS" -v keys="$2.keys" '
	BEGIN { while ((getline k < keys) > 0) has[k] = 1 }
	!($1 ~ per) || ($1 in has)'
	rm -f "$2.keys"
}
