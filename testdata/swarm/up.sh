#!/bin/sh
# up.sh — starts a single-node Docker Swarm for plug's tests, on Debian
# bookworm as root, and writes $PLUG_TEST_ENV_DIR/swarm.env (default
# /run/plug-test/swarm.env) for the tests to read:
#
#   DOCKER_HOST     unix:///var/run/docker.sock
#   DOCKER          the docker CLI that matches the daemon (API 1.41)
#   SWARM_NETWORK   plugnet, an attachable overlay network
#   WORKLOAD_IMAGE  plug-test/workload:1 (testdata/workload)
#   PLUG_IMAGE      plug:dev, loaded from dist/plug-image.tar (`./build.sh image`);
#                   empty when that archive was not built
#
# Installs docker.io and nftables when missing, puts a guard on the uplink
# (nothing to private or test ranges leaves the machine), starts containerd
# and dockerd with configuration of their own, Docker address ranges inside
# 198.19.0.0/16, `swarm init` on loopback, then loads the images. Running it
# again while the swarm is up only brings what changed up to date.
# down.sh undoes all of it.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/lib.sh"
start=$(date +%s.%N)

[ "$(id -u)" = 0 ] || die "run me as root (I start dockerd and change the firewall)"

install_packages() {
	missing=
	[ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] || missing=" docker.io"
	command -v nft >/dev/null || missing="$missing nftables"
	[ -n "$missing" ] || return 0
	say "installing$missing"
	apt="apt-get -q -y -o DPkg::Lock::Timeout=300"
	DEBIAN_FRONTEND=noninteractive $apt install --no-install-recommends $missing >"$STATE/apt.log" 2>&1 ||
		{ $apt update >>"$STATE/apt.log" 2>&1 &&
			DEBIAN_FRONTEND=noninteractive $apt install --no-install-recommends $missing >>"$STATE/apt.log" 2>&1; } ||
		die "could not install$missing; see $STATE/apt.log"
}

# refuse_foreign_dockerd stops when a dockerd that is not ours answers on the
# socket: this script would fight it over the socket and the firewall.
refuse_foreign_dockerd() {
	alive "$STATE/dockerd.pid" && return 0
	pid=$(pidof dockerd 2>/dev/null || :)
	[ -z "$pid" ] || die "a dockerd this script did not start is running (pid $pid); stop it first"
}

install_guard() {
	devs=$(uplinks | sed 's/.*/"&"/' | paste -sd, -)
	{
		echo "table inet $GUARD_TABLE {}"
		echo "delete table inet $GUARD_TABLE"
		echo "table inet $GUARD_TABLE {"
		echo "  comment \"testdata/swarm: no test traffic leaves the machine\""
		echo "  set private4 { type ipv4_addr; flags interval;"
		echo "    elements = { 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16, 198.18.0.0/15 } }"
		echo "  chain forward { type filter hook forward priority filter - 10; policy accept;"
		if [ -n "$devs" ]; then
			echo "    oifname { $devs } ip daddr @private4 counter reject with icmpx type admin-prohibited"
			echo "    oifname { $devs } ip saddr 198.18.0.0/15 counter reject with icmpx type admin-prohibited"
		fi
		echo "  }"
		# The machine's own traffic to private ranges (its DNS server) stays
		# allowed; only the test ranges may not leave.
		echo "  chain output { type filter hook output priority filter - 10; policy accept;"
		if [ -n "$devs" ]; then
			echo "    oifname { $devs } ip daddr 198.18.0.0/15 counter reject with icmpx type admin-prohibited"
			echo "    oifname { $devs } ip saddr 198.18.0.0/15 counter reject with icmpx type admin-prohibited"
		fi
		echo "  }"
		echo "}"
	} >"$STATE/guard.nft"
	nft -f "$STATE/guard.nft"
}

write_config() {
	mkdir -p "$CONF"
	cat >"$CONF/containerd.toml" <<EOF
version = 2
root = "$DATA_ROOT/containerd/daemon"
state = "$STATE/containerd"
oom_score = 0
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CONTAINERD_SOCK"
[debug]
  level = "warn"
EOF
	cat >"$CONF/daemon.json" <<EOF
{
  "hosts": ["$DOCKER_HOST"],
  "pidfile": "$STATE/dockerd.pid",
  "data-root": "$DATA_ROOT",
  "exec-root": "$EXEC_ROOT",
  "containerd": "$CONTAINERD_SOCK",
  "bip": "$BRIDGE_IP",
  "default-address-pools": [{"base": "$LOCAL_POOL", "size": 24}],
  "ip": "127.0.0.1",
  "ip-masq": false,
  "oom-score-adjust": 0,
  "log-driver": "json-file",
  "features": {"buildkit": false}
}
EOF
}

# start_daemons starts containerd and dockerd unless they run, detached and
# without the caller's other open files (a lock it holds must not be held
# by the daemons for as long as they run).
start_daemons() {
	# Our own containerd: dockerd would otherwise share the one the Kubernetes
	# harness runs on /run/containerd/containerd.sock.
	if ! alive "$STATE/containerd.pid"; then
		rm -f "$CONTAINERD_SOCK" # left by a containerd that was killed
		setsid containerd --config "$CONF/containerd.toml" >"$STATE/containerd.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
		echo $! >"$STATE/containerd.pid"
	fi
	wait_for 30 "containerd (see $STATE/containerd.log)" ctr --address "$CONTAINERD_SOCK" version
	if ! alive "$STATE/dockerd.pid"; then
		setsid dockerd --config-file "$CONF/daemon.json" >"$STATE/dockerd.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
	fi
	wait_for 30 "dockerd (see $STATE/dockerd.log)" $DOCKER version
}

# init_swarm creates docker_gwbridge ourselves (so it gets our range, binds
# published ports to loopback and masquerades nothing), then the swarm, then
# plugnet.
init_swarm() {
	$DOCKER network inspect docker_gwbridge >/dev/null 2>&1 ||
		$DOCKER network create --driver bridge --subnet "$GWBRIDGE_SUBNET" \
			-o com.docker.network.bridge.name=docker_gwbridge \
			-o com.docker.network.bridge.enable_icc=false \
			-o com.docker.network.bridge.enable_ip_masquerade=false \
			-o com.docker.network.bridge.host_binding_ipv4=127.0.0.1 \
			docker_gwbridge >/dev/null
	if [ "$($DOCKER info -f '{{.Swarm.LocalNodeState}}')" != active ]; then
		$DOCKER swarm init --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377 \
			--default-addr-pool "$SWARM_POOL" --default-addr-pool-mask-length 24 >/dev/null
	fi
	$DOCKER network inspect "$SWARM_NETWORK" >/dev/null 2>&1 ||
		$DOCKER network create --driver overlay --attachable "$SWARM_NETWORK" >/dev/null
}

# check_ranges fails unless every Docker network lies inside 198.19.0.0/16.
check_ranges() {
	bad=$($DOCKER network inspect -f '{{.Name}}{{range .IPAM.Config}} {{.Subnet}}{{end}}' $($DOCKER network ls -q) |
		awk '{for (i = 2; i <= NF; i++) if ($i !~ /^198\.19\./) print $1, $i}')
	[ -z "$bad" ] || die "Docker networks outside 198.19.0.0/16: $bad"
}

# load_image TAR NAME loads TAR unless NAME already is that image.
load_image() {
	want=sha256:$(tar -xOf "$1" manifest.json | sed 's/.*"Config":"\([0-9a-f]*\)\.json".*/\1/')
	have=$($DOCKER image inspect -f '{{.Id}}' "$2" 2>/dev/null || :)
	[ "$want" = "$have" ] || $DOCKER load -q -i "$1" >/dev/null
}

load_images() {
	[ -x "$repo/testdata/workload/images.sh" ] || die "testdata/workload/images.sh is missing"
	"$repo/testdata/workload/images.sh" "$CACHE/workload"
	load_image "$CACHE/workload/workload-image.tar" "$WORKLOAD_IMAGE"
	plug_image=
	if [ -f "$repo/dist/plug-image.tar" ]; then
		load_image "$repo/dist/plug-image.tar" "$PLUG_IMAGE"
		plug_image=$PLUG_IMAGE
	else
		say "dist/plug-image.tar not built (./build.sh image): PLUG_IMAGE left empty"
	fi
}

# anchor_network keeps a container on plugnet, so the network stays set up
# on this node between tests. Without it, the network is torn down when the
# last task using it stops, and a container joining it at that moment fails
# with "network ... not found".
anchor_network() {
	$DOCKER container inspect plugnet-anchor >/dev/null 2>&1 ||
		$DOCKER run --detach --restart always --name plugnet-anchor --network "$SWARM_NETWORK" \
			"$WORKLOAD_IMAGE" pause >/dev/null
}

write_env() {
	mkdir -p "$ENV_DIR"
	cat >"$ENV_FILE.new" <<EOF
# written by testdata/swarm/up.sh; removed by testdata/swarm/down.sh
DOCKER_HOST=$DOCKER_HOST
DOCKER=$DOCKER
SWARM_NETWORK=$SWARM_NETWORK
WORKLOAD_IMAGE=$WORKLOAD_IMAGE
PLUG_IMAGE=$plug_image
EOF
	mv "$ENV_FILE.new" "$ENV_FILE"
}

# Daemons of an earlier up.sh that are gone (killed, or ended with the
# session that started them) leave bridges, rules and mounts: undo those
# first, so that the snapshot shows the machine without them.
if [ -d "$STATE/before" ] && ! alive "$STATE/dockerd.pid" && ! alive "$STATE/containerd.pid"; then
	say "the daemons of an earlier up.sh are gone: cleaning up after them"
	"$here/down.sh" || say "(going on: those differences were there before this up.sh)"
fi
mkdir -p "$STATE"
install_packages
refuse_foreign_dockerd
fresh=false
if [ ! -d "$STATE/before" ]; then
	snapshot "$STATE/before.new"
	[ -e /run/containerd ] || touch "$STATE/before.new/no-run-containerd"
	mv "$STATE/before.new" "$STATE/before"
	fresh=true
fi
install_guard
write_config
start_daemons
# A fresh start begins with an empty engine, whatever an earlier dockerd
# that was killed kept in the data root (services, containers, networks).
! $fresh || remove_workloads
init_swarm
check_ranges
load_images
anchor_network
write_env
say "ready in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s; env in $ENV_FILE"
