#!/bin/sh
# down.sh — undoes up.sh: stops the components, removes every pod (through
# containerd, so each pod's network is torn down), the mounts, network
# namespaces, interfaces, nftables tables and iptables chains the cluster
# made, puts back the sysctls, and removes the env files, the guard, and
# the node's registry with what was pushed to it. The builds, the PKI and
# containerd's image store stay for the next up.sh.
#
# Then it compares the machine with the snapshot up.sh took before starting
# anything (ip link, ip netns, nft ruleset, iptables-save, sysctls, mounts,
# cgroups, directories) and exits 1 printing any difference. Running it when
# the cluster is down does nothing.
set -eu
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
. "$HERE/machine.sh"

# our_processes prints the pids of processes started for the cluster that
# still run, found by command line so that none escapes a lost pid file:
# the components (and the loops restarting them), containerd and its shims.
our_processes() {
	for p in /proc/[0-9]*; do
		case $(tr '\0' ' ' 2>/dev/null <"$p/cmdline") in
		*"$KUBE "* | *"$ETC/containerd.toml"* | *"$ETC/registry.yml"* | *containerd-shim*"$CONTAINERD_SOCK"*) echo "${p#/proc/}" ;;
		esac
	done
}

# kill_leftovers ends what stop missed, SIGTERM first.
kill_leftovers() {
	left=$(our_processes)
	[ -n "$left" ] || return 0
	say "ending leftover processes: $left"
	kill -TERM $left 2>/dev/null || true
	sleep 1
	kill -KILL $(our_processes) 2>/dev/null || true
}

remove_pods() {
	pid_of containerd >/dev/null || return 0
	"$KUBE" cri-clean -endpoint "unix://$CONTAINERD_SOCK" || say "some pods could not be removed (above)"
}

# unmount_all unmounts what the cluster mounted: each mount under
# MOUNT_PREFIXES that up.sh did not find, but of the network namespaces only
# the pods' (cni-*). Others' namespaces stay mounted, and so does NETNS_DIR
# while they are in it. A mount hidden under another can be reached once
# the one above it is gone: hence rounds, until one unmounts nothing.
unmount_all() {
	while :; do
		progress=false
		for m in $(unmountable); do
			if [ "$m" = "$NETNS_DIR" ]; then
				umount "$m" 2>/dev/null && progress=true
			else
				{ umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; } && progress=true
			fi
		done
		$progress || break
	done
	for m in $(unmountable); do
		if [ "$m" = "$NETNS_DIR" ]; then
			say "$NETNS_DIR stays a mount point: network namespaces the cluster did not make are in it ($(ip netns list 2>/dev/null | awk '$1 !~ /^cni-/ { print $1 }' | paste -sd' ' -))"
		else
			say "cannot unmount $m"
		fi
	done
}

# unmountable prints, deepest first, the mounts unmount_all is to unmount.
unmountable() {
	our_mounts | sort -r | while read -r m; do
		case $m in
		"$NETNS_DIR"/cni-*) ;;
		"$NETNS_DIR"/*) continue ;;
		esac
		[ -f "$SNAPSHOT/mounts" ] && awk -v m="$m" '$1 == m { found = 1 } END { exit !found }' "$SNAPSHOT/mounts" && continue
		echo "$m"
	done
}

# remove_shim_leftovers removes what the shims of the cluster's containerd
# leave behind in /run/containerd (which every containerd on the machine
# shares, Docker's too) when they were killed before they could clean up:
# their sockets in /run/containerd/s, each named by the hash of
# containerd's socket, the namespace and the sandbox, and runc's state of
# each container. It must run before RUN, which holds the bundles naming
# them, is removed.
remove_shim_leftovers() {
	for bundle in "$RUN"/containerd/io.containerd.runtime.v2.task/k8s.io/*; do
		[ -d "$bundle" ] || continue
		id=${bundle##*/}
		rm -f "/run/containerd/s/$(printf '%s' "$CONTAINERD_SOCK/k8s.io/$id" | sha256sum | cut -d' ' -f1)"
		rm -rf "/run/containerd/runc/k8s.io/$id"
	done
	rmdir /run/containerd/runc/k8s.io /run/containerd/runc 2>/dev/null || true
}

remove_netns() {
	for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ { print $1 }'); do
		ip netns delete "$ns" || true
	done
}

remove_links() {
	for v in $(ip -o link show master "$CNI_BRIDGE" 2>/dev/null | awk '{ n = $2; sub(/:$/, "", n); sub(/@.*/, "", n); print n }'); do
		ip link delete "$v" 2>/dev/null || true
	done
	for l in "$CNI_BRIDGE" "$NODE_LINK"; do
		! ip link show "$l" >/dev/null 2>&1 || ip link delete "$l"
	done
}

# remove_iptables TOOL deletes the CNI-* and KUBE-* chains of every table
# and the rules elsewhere that jump to them (the CNI plugins and the kubelet
# make them), then drops tables that were absent before and are now empty.
remove_iptables() {
	tool=$1
	family=ip
	[ "$tool" = iptables ] || family=ip6
	"$tool-save" | undo_chains '(CNI|KUBE)-' | "$tool-restore" --noflush
	"$tool-save" | awk '
	/^\*/ { table = substr($1, 2); used = 0; next }
	/^:/ { if ($1 !~ /^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING)$/ || $2 != "ACCEPT") used = 1; next }
	/^-A / { used = 1; next }
	/^COMMIT/ { if (!used) print table }' | while read -r table; do
		grep -qx "\*$table" "$SNAPSHOT/$tool" || nft delete table "$family" "$table"
	done
}

remove_nft_tables() {
	for t in "ip kube-proxy" "ip6 kube-proxy" "inet plug_kube_guard"; do
		! nft list table $t >/dev/null 2>&1 || nft delete table $t
	done
}

# remove_cgroups removes the cgroups the kubelet made (kubepods and below),
# killing any container process containerd failed to stop.
remove_cgroups() {
	for top in /sys/fs/cgroup/*/kubepods; do
		[ -d "$top" ] || continue
		for pid in $(find "$top" -name cgroup.procs -exec cat {} +); do
			say "killing pod process $pid, left running"
			kill -KILL "$pid" 2>/dev/null || true
		done
	done
	for top in /sys/fs/cgroup/*/kubepods; do
		[ -d "$top" ] || continue
		find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || say "cannot remove $top"
	done
}

remove_kubectl_wrapper() {
	! grep -qs 'testdata/cluster' /usr/local/bin/kubectl || rm -f /usr/local/bin/kubectl
}

need_root

if [ ! -d "$SNAPSHOT" ] && [ -z "$(our_processes)" ] && ! ip link show "$NODE_LINK" >/dev/null 2>&1; then
	say "not up; nothing to do"
	exit 0
fi
rm -f "$ENV_DIR/kube.env" "$ENV_DIR/kube.kubeconfig" "$ENV_DIR/kube-ca.crt"
stop kubelet kube-scheduler kube-controller-manager
remove_pods
stop containerd kube-proxy kube-apiserver
stop etcd registry
kill_leftovers
say "stopped"
left=$(our_processes)
[ -z "$left" ] || die "still running: $left"

unmount_all
remove_shim_leftovers
remove_netns
remove_links
remove_nft_tables
command -v iptables-save >/dev/null && {
	remove_iptables iptables
	remove_iptables ip6tables
}
remove_cgroups
remove_kubectl_wrapper
rm -rf "$STATE/etcd" "$STATE/kubelet" "$STATE/cni/ipam" "$STATE/registry" "$ETC/registry.yml" "$RUN"
rmdir "$ENV_DIR" 2>/dev/null || true

[ -d "$SNAPSHOT" ] || {
	say "down (no snapshot from up.sh to compare with)"
	exit 0
}
restore_sysctls "$SNAPSHOT"
restore_dirs "$SNAPSHOT"
after=$SNAPSHOT.after
rm -rf "$after"
snapshot "$after"
if ! compare "$SNAPSHOT" "$after"; then
	rm -rf "$SNAPSHOT.failed"
	mv "$SNAPSHOT" "$SNAPSHOT.failed"
	die "the machine differs from before up.sh (above); snapshots in $SNAPSHOT.failed and $after"
fi
rm -rf "$SNAPSHOT" "$after"
say "down; the machine is as up.sh found it"
