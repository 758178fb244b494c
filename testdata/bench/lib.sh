# lib.sh — the steps of run.sh: what it builds, the laptop namespace, the
# OpenSSH server, the Kubernetes objects, the profiles' links, the clean-up.
# Sourced by run.sh, which sets here, repo and WORK.

OUT=$here/out
CACHE=${PLUG_TEST_CACHE:-/var/cache/plug-test}/bench
TOOL=$CACHE/benchtool
BENCH_IMAGE=plug-bench/tool:1
# The test cluster's containerd, as testdata/cluster/lib.sh places it.
CONTAINERD_SOCK=${PLUG_TEST_CONTAINERD_SOCK:-/run/plug-test/kube/containerd/containerd.sock}
KUBE_ENV=/run/plug-test/kube.env

# The laptop: a network namespace joined to the machine in 198.18.48.0/24
# by a link of two devices: a veth pair, or, for a profile with delay and
# loss, two TUN devices joined by benchtool link.
NETNS=plugbench
LINK_HOST=plugbench0
LINK_LAPTOP=plugbench1
HOST_IP=198.18.48.1
LAPTOP_IP=198.18.48.2
POD_RANGE=198.18.0.0/24

# The Kubernetes namespace of the agent and the bench workloads.
KNS=plug-bench
# The OpenSSH baseline's sshd: on the node's address, beside the agent's
# NodePort; its ssh -R listens there on SSH_FORWARD_PORT.
SSHD_PORT=2022
SSH_FORWARD_PORT=19001

say() { echo "bench: $*" >&2; }
die() {
	echo "bench: $*" >&2
	exit 1
}

# build_tool builds the bench tool and its image (FROM scratch, entrypoint
# /benchtool) when its sources changed.
build_tool() {
	stamp=$(cd "$here" && cat go.mod $(ls *.go | grep -v _test.go) | sha256sum | cut -d' ' -f1)
	if [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$CACHE/bench-image.tar" ]; then
		return
	fi
	(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$TOOL" .)
	root=$WORK/image-root
	mkdir -p "$root"
	cp "$TOOL" "$root/benchtool"
	MKIMAGE_ENTRYPOINT=/benchtool "$repo/build.sh" mkimage "$root" "$CACHE/bench-image.tar" "$BENCH_IMAGE"
	rm -f "$CACHE/imported"
	echo "$stamp" >"$CACHE/stamp"
}

# bring_up_cluster starts the test cluster (a no-op when it is up; it
# imports a changed plug image), then imports the bench tool's image. With
# PLUG_BENCH_IMAGE set, a cluster that is up is left as it is, and
# dist/plug-image.tar is imported for the agent under that tag.
bring_up_cluster() {
	[ -f "$repo/dist/plug-image.tar" ] || die "no dist/plug-image.tar: run without --no-build, or ./build.sh image"
	if [ -n "${PLUG_BENCH_IMAGE:-}" ] && [ -f "$KUBE_ENV" ]; then
		ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$repo/dist/plug-image.tar" >/dev/null ||
			die "could not import dist/plug-image.tar into the cluster's containerd"
	else
		"$repo/testdata/cluster/up.sh"
	fi
	. "$KUBE_ENV"
	PLUG_IMAGE=${PLUG_BENCH_IMAGE:-$PLUG_IMAGE}
	export KUBECONFIG
	KUBECTL=${KUBECTL:-kubectl}
	sum=$(sha256sum "$CACHE/bench-image.tar" | cut -d' ' -f1)
	if [ "$(cat "$CACHE/imported" 2>/dev/null)" != "$sum" ]; then
		ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$CACHE/bench-image.tar" >/dev/null ||
			die "could not import $BENCH_IMAGE into the cluster's containerd"
		echo "$sum" >"$CACHE/imported"
	fi
}

# sshd_binary unpacks Debian's openssh-server into the cache, once, without
# installing it: no system sshd is configured or started.
sshd_binary() {
	SSHD=$CACHE/openssh/usr/sbin/sshd
	[ -x "$SSHD" ] && return
	say "fetching Debian's openssh-server (unpacked into $CACHE/openssh, not installed)"
	(cd "$WORK" && apt-get download openssh-server >/dev/null 2>&1) ||
		die "apt-get download openssh-server failed; run apt-get update first"
	dpkg-deb -x "$WORK"/openssh-server_*.deb "$CACHE/openssh"
}

# make_laptop creates the laptop namespace.
make_laptop() {
	[ "$(sysctl -n net.ipv4.ip_forward)" = 1 ] || die "IP forwarding is off: is the test cluster up?"
	if ip netns list 2>/dev/null | grep -qw "$NETNS"; then
		die "network namespace $NETNS exists: another benchmark runs, or one was killed (ip netns del $NETNS)"
	fi
	ip netns add "$NETNS"
	ip -n "$NETNS" link set lo up
	if iptables -S FORWARD 2>/dev/null | grep -q -- '-P FORWARD DROP'; then
		iptables -I FORWARD -i "$LINK_HOST" -j ACCEPT
		iptables -I FORWARD -o "$LINK_HOST" -j ACCEPT
		FORWARD_RULES=1
	fi
}

# link_up none|wan joins the laptop to the machine for a profile:
#
#   none   a veth pair, as fast as the kernel goes
#   wan    10 ms each way and 0.1 % loss of the packets each way: tc netem on
#          a veth pair with segmentation offloads off (so the loss is per
#          wire packet), or, on a kernel without sch_netem, benchtool link
#          carrying the packets between two TUN devices (link.go)
#   wan100 the same with 50 ms each way
#
# WAN_LINK says which one the wan profiles got.
link_up() {
	ip link add "$LINK_HOST" type veth peer name "$LINK_LAPTOP" netns "$NETNS"
	delay=
	case $1 in
	wan) delay=10ms ;;
	wan100) delay=50ms ;;
	esac
	if [ -n "$delay" ]; then
		netem="netem delay $delay loss 0.1% limit 100000"
		# shellcheck disable=SC2086 # netem is words
		if tc qdisc add dev "$LINK_HOST" root $netem 2>/dev/null; then
			ip netns exec "$NETNS" tc qdisc add dev "$LINK_LAPTOP" root $netem
			ethtool -K "$LINK_HOST" tso off gso off >/dev/null 2>&1
			ip netns exec "$NETNS" ethtool -K "$LINK_LAPTOP" tso off gso off >/dev/null 2>&1
			WAN_LINK="tc netem on a veth pair"
		else
			ip link del "$LINK_HOST"
			tun_link "$delay"
			WAN_LINK="benchtool link between two TUN devices (this kernel has no sch_netem)"
		fi
	fi
	ip addr add "$HOST_IP/24" dev "$LINK_HOST"
	ip link set "$LINK_HOST" up
	ip -n "$NETNS" addr add "$LAPTOP_IP/24" dev "$LINK_LAPTOP"
	ip -n "$NETNS" link set "$LINK_LAPTOP" up
	ip -n "$NETNS" route add "$NODE_IP/32" via "$HOST_IP"
	ip -n "$NETNS" route add "$POD_RANGE" via "$HOST_IP"
}

# tun_link DELAY starts benchtool link with DELAY each way and the wan
# profiles' loss, and moves its laptop end into the laptop's namespace.
tun_link() {
	"$TOOL" link -a "$LINK_HOST" -b "$LINK_LAPTOP" -delay "$1" -loss 0.1 >"$WORK/link.out" 2>"$WORK/link.log" &
	LINK_PID=$!
	for _ in $(seq 50); do
		grep -q ready "$WORK/link.out" && break
		kill -0 "$LINK_PID" 2>/dev/null || die "benchtool link failed: $(cat "$WORK/link.log")"
		sleep 0.1
	done
	ip link set "$LINK_LAPTOP" netns "$NETNS"
	ip link set "$LINK_HOST" txqueuelen 10000
	ip -n "$NETNS" link set "$LINK_LAPTOP" txqueuelen 10000
}

# link_down removes the laptop's link.
link_down() {
	if [ -n "${LINK_PID:-}" ]; then
		kill "$LINK_PID" 2>/dev/null
		wait "$LINK_PID" 2>/dev/null || true
		LINK_PID=
	fi
	ip link del "$LINK_HOST" 2>/dev/null || true
}

# start_sshd starts an sshd of the benchmark's own, with its own config and
# keys, on the node's address (where the agent's NodePort is too), port
# SSHD_PORT: the OpenSSH baseline (ssh -L to a Service's address, ssh -R on
# the node's address).
start_sshd() {
	for port in "$SSHD_PORT" "$SSH_FORWARD_PORT"; do
		if ss -Hltn "src $NODE_IP:$port" | grep -q .; then
			die "$NODE_IP:$port is taken (an sshd of an earlier benchmark?): $(ss -Hltnp "src $NODE_IP:$port")"
		fi
	done
	ssh-keygen -q -t ed25519 -N '' -f "$WORK/ssh_host_ed25519_key"
	ssh-keygen -q -t ed25519 -N '' -f "$WORK/id_ed25519"
	cp "$WORK/id_ed25519.pub" "$WORK/authorized_keys"
	cat >"$WORK/sshd_config" <<EOF
Port $SSHD_PORT
ListenAddress $NODE_IP
HostKey $WORK/ssh_host_ed25519_key
PidFile $WORK/sshd.pid
AuthorizedKeysFile $WORK/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
GatewayPorts clientspecified
X11Forwarding no
PrintMotd no
LogLevel ERROR
ClientAliveInterval 5
ClientAliveCountMax 3
EOF
	# Debian's sshd wants a privilege separation user "sshd" and an empty
	# /run/sshd: it gets both in a mount namespace of its own (a copy of
	# /etc/passwd with that user bound over the original, a tmpfs on /run),
	# so nothing on the machine changes.
	cp /etc/passwd "$WORK/passwd"
	grep -q '^sshd:' "$WORK/passwd" || echo 'sshd:x:65534:65534::/run/sshd:/usr/sbin/nologin' >>"$WORK/passwd"
	cat >"$WORK/sshd.sh" <<EOF
mount --bind "$WORK/passwd" /etc/passwd
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -m 0755 /run/sshd
"$SSHD" -t -f "$WORK/sshd_config" || exit 1
exec "$SSHD" -D -e -f "$WORK/sshd_config"
EOF
	unshare -m --propagation private sh "$WORK/sshd.sh" 2>"$WORK/sshd.log" &
	SSHD_PID=$!
	for _ in $(seq 50); do
		ss -Hltn "src $NODE_IP:$SSHD_PORT" | grep -q . && return
		kill -0 "$SSHD_PID" 2>/dev/null || break
		sleep 0.1
	done
	die "the bench sshd did not start: $(cat "$WORK/sshd.log")"
}

# deploy applies deploy/plug-k8s.yaml and the bench workloads in KNS and
# waits until they are ready. The agent's NodePort is 32222 unless another
# namespace holds it.
deploy() {
	# The bench's runs all use one key, where as many developers would each
	# have their own: its agent takes more from one key than the default
	# caps allow (16 runs, 32 names, 32 SSH connections, 1000 connections
	# through the agent, which its serve runs and lingering UDP flows share
	# with the 1,000 concurrent connections).
	deploy_agent PLUG_MAX_RUNS_PER_KEY=64 PLUG_MAX_NAMES_PER_KEY=128 \
		PLUG_MAX_CONNECTIONS_PER_KEY=128 PLUG_MAX_CHANNELS_PER_KEY=4000
	sed -e "s|BENCH_IMAGE|$BENCH_IMAGE|" -e "s|WORKLOAD_IMAGE|$WORKLOAD_IMAGE|" "$here/k8s.yaml" |
		$KUBECTL -n "$KNS" apply -f - >/dev/null
	$KUBECTL -n "$KNS" rollout status deployment/benchto --timeout=120s >/dev/null
	$KUBECTL -n "$KNS" wait --for=condition=Ready pod/benchsrv pod/benchcli --timeout=120s >/dev/null
	SERVER_IP=$($KUBECTL -n "$KNS" get pod benchsrv -o jsonpath='{.status.podIP}')
	SERVER_CLUSTER_IP=$($KUBECTL -n "$KNS" get svc benchsrv -o jsonpath='{.spec.clusterIP}')
}

# deploy_agent creates namespace KNS (deleting one an earlier run left)
# with the agent of deploy/plug-k8s.yaml, on NodePort 32222 or the next
# free one (NODEPORT), its environment set to the assignments given, and
# waits until it runs.
deploy_agent() {
	if $KUBECTL get ns "$KNS" >/dev/null 2>&1; then
		say "deleting namespace $KNS left by an earlier run"
		$KUBECTL delete ns "$KNS" --timeout=120s >/dev/null
	fi
	NODEPORT=32222
	taken=$($KUBECTL get svc -A -o jsonpath='{range .items[*]}{.spec.ports[*].nodePort}{" "}{end}')
	while echo " $taken " | grep -q " $NODEPORT "; do
		NODEPORT=$((NODEPORT + 1))
	done
	[ "$NODEPORT" = 32222 ] || say "NodePort 32222 is taken by another namespace; the agent answers on $NODEPORT"
	$KUBECTL create ns "$KNS" >/dev/null
	sed -e "s|image: plug:dev|image: $PLUG_IMAGE|" -e "s|nodePort: 32222|nodePort: $NODEPORT|" \
		-e "s|\$(HOST_IP):32222|\$(HOST_IP):$NODEPORT|" "$repo/deploy/plug-k8s.yaml" |
		$KUBECTL -n "$KNS" apply -f - >/dev/null
	$KUBECTL -n "$KNS" set env deployment/plug "$@" >/dev/null
	$KUBECTL -n "$KNS" rollout status deployment/plug --timeout=120s >/dev/null
	# set env replaced the pod that apply started: wait until that one is
	# gone, so that no connection of the bench reaches an agent on its way
	# out (plug's runs would move to the new one, but ssh's would end).
	for _ in $(seq 90); do
		[ "$($KUBECTL -n "$KNS" get pods -l app.kubernetes.io/name=plug -o name | wc -l)" -le 1 ] && return
		sleep 1
	done
	die "the agent's replaced pod in $KNS was still there 90 s after its successor ran"
}

# in_laptop runs a command in the laptop namespace, with the laptop's HOME.
in_laptop() { ip netns exec "$NETNS" env HOME="$WORK/home" "$@"; }

# laptop_profile gives the laptop a plug profile "bench" for the agent, the
# way a developer adds one by hand, with a key pair of its own.
laptop_profile() {
	PLUG=$repo/dist/plug-linux-amd64
	mkdir -p "$WORK/home"
	hostkey=
	for _ in $(seq 60); do
		hostkey=$(in_laptop ssh-keyscan -T 2 -t ed25519 -p "$NODEPORT" "$NODE_IP" 2>/dev/null | awk '{print $2" "$3}')
		[ -n "$hostkey" ] && break
		sleep 1
	done
	[ -n "$hostkey" ] || die "the agent does not answer on $NODE_IP:$NODEPORT from the laptop"
	in_laptop "$PLUG" profile add bench --host "$NODE_IP" --port "$NODEPORT" --user bench --host-key "$hostkey" >/dev/null
	in_laptop "$PLUG" keygen -p bench >/dev/null
}

# drive measures one profile, appending its rows to CSV.
drive() {
	# The wan profile measures its paths' latency at the same time (its
	# round trips are the link's 20 ms, not work of the machine), 2,000
	# round trips and 500 setups each in 10 turns: 10,000 would take 4 min.
	# The wan100 profile measures the paths only, with 400 round trips and
	# 100 setups.
	bytes=1073741824 rr=10000 connects=1000 starts=10 runs=50 parallel=false only_paths=false only_start=false only_udp=false udp_for=10s
	[ "$1" = wan ] && rr=2000 connects=500 parallel=true
	[ "$1" = wan100 ] && rr=400 connects=100 parallel=true only_paths=true
	if [ "$QUICK" = 1 ]; then
		bytes=67108864 rr=2000 connects=200 starts=3 runs=20 udp_for=3s
		[ "$1" = wan ] && rr=300 connects=50
		[ "$1" = wan100 ] && rr=100 connects=20
	fi
	[ "$ONLY_START" = 0 ] || only_start=true
	[ "$ONLY_UDP" = 0 ] || only_udp=true
	"$TOOL" drive -profile "$1" -work "$OUT/logs" -netns "$NETNS" -home "$WORK/home" \
		-plug "$PLUG" -tool "$TOOL" -kubectl "$KUBECTL" -ns "$KNS" \
		-server-ip "$SERVER_IP" -server-cluster-ip "$SERVER_CLUSTER_IP" \
		-laptop-ip "$LAPTOP_IP" -node-ip "$NODE_IP" \
		-agent-port "$NODEPORT" -sshd-port "$SSHD_PORT" -ssh-forward-port "$SSH_FORWARD_PORT" -sshd-pid "$SSHD_PID" -ssh-key "$WORK/id_ed25519" \
		-bytes "$bytes" -rr "$rr" -connects "$connects" -concurrent 1000 \
		-starts "$starts" -runs "$runs" -udp-for "$udp_for" -parallel="$parallel" -only-paths="$only_paths" \
		-only-start="$only_start" -only-udp="$only_udp" >>"$CSV"
}

# machine describes this machine for the results.
machine() {
	cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
	mem=$(awk '/^MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
	os=$(. /etc/os-release && echo "$PRETTY_NAME")
	echo "$(nproc) cores ($cpu), $mem GB, $os, Linux $(uname -r), $(go version | cut -d' ' -f3), $(ssh -V 2>&1 | cut -d, -f1)"
}

args_shown() {
	for a in "$@"; do printf ' %s' "$a"; done
}

# cleanup removes everything run.sh created, whatever state it got to.
cleanup() {
	rc=$?
	set +e
	if ip netns list 2>/dev/null | grep -qw "$NETNS"; then
		for pid in $(ip netns pids "$NETNS"); do kill "$pid" 2>/dev/null; done
		sleep 1
		for pid in $(ip netns pids "$NETNS"); do kill -9 "$pid" 2>/dev/null; done
		ip netns del "$NETNS"
	fi
	link_down
	if [ -n "${SSHD_PID:-}" ]; then
		# The listener and the sessions it started (which hold the -R ports).
		for pid in $(ps -o pid= --ppid "$SSHD_PID") "$SSHD_PID"; do kill "$pid" 2>/dev/null; done
	fi
	if [ -n "${FORWARD_RULES:-}" ]; then
		iptables -D FORWARD -i "$LINK_HOST" -j ACCEPT
		iptables -D FORWARD -o "$LINK_HOST" -j ACCEPT
	fi
	if [ -n "${KUBECTL:-}" ] && $KUBECTL get ns "$KNS" >/dev/null 2>&1; then
		# The agent's log goes with its namespace: kept beside the others.
		$KUBECTL -n "$KNS" logs deployment/plug >"$OUT/logs/agent.log" 2>&1 || true
		$KUBECTL delete ns "$KNS" --timeout=120s >/dev/null || say "namespace $KNS is still being deleted"
	fi
	rm -rf "$WORK"
	exit $rc
}
