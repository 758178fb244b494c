# lib.sh — what up.sh and down.sh share: the cluster's addresses, where its
# files live, and how processes are started and stopped. Sourced, not run.

# Addresses: all inside 198.18.0.0/15, on interfaces the scripts create.
NODE_IP=198.18.32.1
NODE_NET=198.18.32.1/24
NODE_NAME=plug-node
POD_CIDR=198.18.0.0/20      # cluster-wide pod range
NODE_POD_CIDR=198.18.0.0/24 # this node's pods (cni0 is .1)
POD_GATEWAY=198.18.0.1
SERVICE_CIDR=198.18.16.0/20
API_SERVICE_IP=198.18.16.1
DNS_IP=198.18.16.10
NODE_LINK=plug0
CNI_BRIDGE=cni0

# Images, as pods name them.
PAUSE_IMAGE=plug-test/pause:1
WORKLOAD_IMAGE=plug-test/workload:1
COREDNS_IMAGE=plug-test/coredns:1
PLUG_IMAGE=plug:dev
# The node's registry (docker-registry, on loopback only) and plug's
# image in it, pushed by up.sh from dist/plug-image.oci.tar.
REGISTRY=127.0.0.1:5123
PLUG_REGISTRY_IMAGE=$REGISTRY/plug:dev

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

# CACHE holds builds (kept across runs), STATE the cluster's files (the PKI
# and containerd's image store are kept; the rest is reset by down.sh), RUN
# what exists only while the cluster is up. ENV_DIR is where tests look.
CACHE=${PLUG_TEST_CACHE:-/var/cache/plug-test}
STATE=/var/lib/plug-test/kube
RUN=/run/plug-test/kube
ENV_DIR=${PLUG_TEST_ENV_DIR:-/run/plug-test}
PKI=$STATE/pki
LOGS=$STATE/log
ETC=$STATE/etc
BIN=$CACHE/kube
KUBE=$BIN/kube
KUBECTL=$BIN/kubectl
CONTAINERD_SOCK=$RUN/containerd/containerd.sock
SNAPSHOT=/run/plug-test/kube-before # what the machine looked like before up.sh

# The components, in the order they start; down.sh stops them in reverse.
COMPONENTS="etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"

# The kernel settings the node changes (kubelet, the CNI bridge): up.sh
# records them, down.sh puts them back.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
net.ipv4.conf.all.forwarding net.ipv6.conf.all.forwarding net.ipv4.conf.all.route_localnet
net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
net.netfilter.nf_conntrack_tcp_timeout_close_wait"

# Where network namespaces are mounted, by containerd for each pod and by
# `ip netns` for everyone else (/var/run is /run).
NETNS_DIR=/run/netns

# Directories the kubelet and containerd create outside STATE and RUN
# whatever they are told; down.sh removes those that did not exist before.
FOREIGN_DIRS="/var/lib/kubelet /var/lib/cni /var/run/netns /run/containerd /etc/cni"

START=$(date +%s.%N)

elapsed() {
	awk -v now="$(date +%s.%N)" -v start="$START" 'BEGIN { printf "%.1f", now - start }'
}

# say prints a status line on stderr, with the seconds since the script began.
say() {
	printf '%s [%5.1fs] %s\n' "$(basename "$0")" "$(elapsed)" "$*" >&2
}

die() {
	printf '%s: %s\n' "$(basename "$0")" "$*" >&2
	exit 1
}

# wait_for, undo_chains
. "$(cd "$(dirname "$0")/.." && pwd)/harness.sh"

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (it creates interfaces, rules and mounts)"
}

# pid_of NAME prints the pid of a running component, or fails.
pid_of() {
	[ -f "$RUN/$1.pid" ] || return 1
	pid=$(cat "$RUN/$1.pid")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# start NAME CMD... runs CMD detached in a process group of its own,
# logging to LOGS/NAME.log, and starts it again whenever it exits (as the
# kubelet restarts static pods: a component may exit while the apiserver
# is still coming up). It keeps none of the caller's other open files: a
# lock the caller holds (flock LOCK up.sh) must not be held by the cluster
# for as long as it runs.
start() {
	name=$1
	shift
	mkdir -p "$LOGS" "$RUN"
	setsid sh -c 'while :; do "$@"; echo "exited ($?); restarting in 1s" >&2; sleep 1; done' \
		"$name" "$@" >"$LOGS/$name.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
	echo $! >"$RUN/$name.pid"
}

# stop NAME... ends components' process groups together: SIGTERM, then
# SIGKILL to what still runs after 10 s.
stop() {
	groups=
	for name in "$@"; do
		if pid=$(pid_of "$name"); then
			kill -TERM "-$pid" 2>/dev/null || true
			groups="$groups $pid"
		fi
		rm -f "$RUN/$name.pid"
	done
	[ -n "$groups" ] || return 0
	i=0
	while [ -n "$(live_members $groups)" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	left=$(live_members $groups)
	[ -n "$left" ] || return 0
	say "killing what ignored SIGTERM for 10s: $(for p in $left; do tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-60; done)"
	kill -KILL $left 2>/dev/null || true
}

# live_members PGID... prints the processes of those process groups that
# have not exited (zombies waiting for init to reap them do not count).
live_members() {
	cat /proc/[0-9]*/stat 2>/dev/null | awk -v groups=" $* " '$3 != "Z" && index(groups, " " $5 " ") { print $1 }'
}

kubectl_admin() {
	"$KUBECTL" --kubeconfig "$PKI/admin.kubeconfig" "$@"
}

# uplink prints the interface of the default route.
uplink() {
	ip -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}'
}
