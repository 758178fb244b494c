#!/bin/sh
# up.sh — starts the single-node Kubernetes that plug's tests and demo run
# against, on Debian bookworm as root, and writes for the tests:
#
#   $PLUG_TEST_ENV_DIR/kube.env          KEY=VALUE: KUBECONFIG, KUBE_SERVER, KUBE_CA,
#                                        KUBE_TOKEN (admin), KUBECTL, NODE_IP, NODE_NAME,
#                                        PLUG_IMAGE, PLUG_REGISTRY_IMAGE, WORKLOAD_IMAGE,
#                                        PAUSE_IMAGE
#   $PLUG_TEST_ENV_DIR/kube.kubeconfig   admin kubeconfig
#   /usr/local/bin/kubectl               kubectl using that kubeconfig by default
#
# (PLUG_TEST_ENV_DIR defaults to /run/plug-test.)
#
# It installs the Debian packages it needs, builds what changed (build.sh),
# records the machine's network state, puts a guard on the uplink, creates
# the node's dummy interface plug0, makes /run/netns a shared mount point
# (as `ip netns` would) unless it is one, starts etcd, containerd, the control
# plane, the kubelet and kube-proxy, imports the images (plug:dev from
# dist/plug-image.tar when `./build.sh image` made it), starts the node's
# registry on 127.0.0.1:5123 and pushes plug's image index there
# (PLUG_REGISTRY_IMAGE, from dist/plug-image.oci.tar), and waits until the
# node is Ready and CoreDNS answers. When the cluster is up already it only
# re-imports and re-pushes images that changed, and starts the registry if
# it does not run. down.sh undoes all of it.
set -eu
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
. "$HERE/machine.sh"
. "$HERE/config.sh"

# python3-dotenv: the tests of --env-file read the file with a standard dotenv parser.
# docker-registry, skopeo, curl: the node's registry and the push to it;
# qemu-user-static: the test that runs the image's arm64 agent.
# zsh, fish, groff-base: the tests of plug completion and plug help --man.
PACKAGES="containerd runc containernetworking-plugins conntrack nftables iptables ipset ethtool socat iproute2 util-linux python3-dotenv docker-registry skopeo curl qemu-user-static zsh fish groff-base"

install_packages() {
	missing=
	for p in $PACKAGES; do
		dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
	done
	[ -n "$missing" ] || return 0
	say "installing$missing"
	mkdir -p "$STATE"
	apt="apt-get -q -y -o DPkg::Lock::Timeout=300"
	{ DEBIAN_FRONTEND=noninteractive $apt install --no-install-recommends $missing ||
		{ $apt update && DEBIAN_FRONTEND=noninteractive $apt install --no-install-recommends $missing; }; } \
		>"$STATE/apt.log" 2>&1 || die "could not install$missing; see $STATE/apt.log"
	# Debian starts its own registry service, listening on every address:
	# the node runs its own, on loopback only.
	case " $missing " in
	*" docker-registry "*)
		! command -v systemctl >/dev/null || systemctl disable --now docker-registry >/dev/null 2>&1 || true
		;;
	esac
}

# running succeeds when every component runs and the API answers.
running() {
	for c in $COMPONENTS; do pid_of "$c" >/dev/null || return 1; done
	kubectl_admin get --raw /readyz >/dev/null 2>&1
}

# remnants succeeds when something of an earlier cluster is still there.
remnants() {
	for c in $COMPONENTS; do [ ! -f "$RUN/$c.pid" ] || return 0; done
	ip link show "$NODE_LINK" >/dev/null 2>&1 && return 0
	nft list table inet plug_kube_guard >/dev/null 2>&1
}

# install_guard rejects, on the uplink, what the cluster must never send off
# the machine: packets from or to the test ranges (198.18.0.0/15), and
# forwarded (pod) packets to private ranges. The machine's own traffic to
# private ranges is rejected too, except DNS to its resolvers.
install_guard() {
	up=$(uplink)
	[ -n "$up" ] || return 0
	dns=$(awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ { printf "%s%s", sep, $2; sep = ", " }' /etc/resolv.conf)
	nft -f - <<EOF
table inet plug_kube_guard {}
delete table inet plug_kube_guard
table inet plug_kube_guard {
	comment "testdata/cluster: no test traffic leaves the machine"
	set private4 {
		type ipv4_addr; flags interval
		elements = { 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16, 198.18.0.0/15 }
	}
	chain forward {
		type filter hook forward priority filter - 10; policy accept
		oifname "$up" ip daddr @private4 counter reject with icmpx type admin-prohibited
		oifname "$up" ip saddr 198.18.0.0/15 counter reject with icmpx type admin-prohibited
	}
	chain output {
		type filter hook output priority filter - 10; policy accept
		$([ -z "$dns" ] || echo "oifname \"$up\" ip daddr { $dns } meta l4proto { tcp, udp } th dport 53 accept")
		oifname "$up" ip daddr @private4 counter reject with icmpx type admin-prohibited
		oifname "$up" ip saddr 198.18.0.0/15 counter reject with icmpx type admin-prohibited
	}
}
EOF
}

# add_node_link creates plug0, the node's address; the Service range is
# routed to it so nothing for a ClusterIP ever takes the default route. A
# kernel without the dummy driver gets an empty bridge instead, which holds
# a local address just as well.
add_node_link() {
	ip link add "$NODE_LINK" type dummy 2>/dev/null || ip link add "$NODE_LINK" type bridge
	ip addr add "$NODE_NET" dev "$NODE_LINK"
	ip link set "$NODE_LINK" up
	ip route add "$SERVICE_CIDR" dev "$NODE_LINK" src "$NODE_IP"
}

# share_netns_dir makes NETNS_DIR a mount point of its own, with shared
# propagation, before the first pod, as `ip netns add` does when it finds it
# is not one. Otherwise the first `ip netns add` after the pods (a benchmark's
# laptop, say) bind-mounts the directory onto itself, hiding the pods'
# namespace mounts made before: the runtime then can neither unmount nor
# unlink them, and a pod's deletion never ends. A mount point that was there
# before is left as it is: later mounts go into it either way.
share_netns_dir() {
	mkdir -p "$NETNS_DIR"
	mountpoint -q "$NETNS_DIR" && return 0
	mount --bind "$NETNS_DIR" "$NETNS_DIR"
	mount --make-shared "$NETNS_DIR"
}

# start_components starts the node and the apiserver; each waits for what
# it needs by itself.
start_components() {
	start etcd "$KUBE" etcd -data-dir "$STATE/etcd"
	start containerd containerd --config "$ETC/containerd.toml"
	start kube-apiserver "$KUBE" kube-apiserver \
		--etcd-servers=http://127.0.0.1:2379 \
		--advertise-address="$NODE_IP" --bind-address="$NODE_IP" --secure-port=6443 \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--client-ca-file="$PKI/ca.crt" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="$PKI/ca.crt" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" \
		--service-account-signing-key-file="$PKI/sa.key" \
		--token-auth-file="$PKI/tokens.csv" \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction,PodSecurity \
		--allow-privileged=true --profiling=false
	start kubelet "$KUBE" kubelet \
		--config="$ETC/kubelet.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
		--root-dir="$STATE/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
	start kube-proxy "$KUBE" kube-proxy --config="$ETC/kube-proxy.yaml"
}

# start_controllers starts what needs the apiserver's default RBAC rules.
start_controllers() {
	start kube-controller-manager "$KUBE" kube-controller-manager \
		--kubeconfig="$PKI/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=true \
		--allocate-node-cidrs=true --cluster-cidr="$POD_CIDR" --node-cidr-mask-size=24 \
		--service-cluster-ip-range="$SERVICE_CIDR" --profiling=false
	start kube-scheduler "$KUBE" kube-scheduler \
		--kubeconfig="$PKI/scheduler.kubeconfig" \
		--authentication-kubeconfig="$PKI/scheduler.kubeconfig" \
		--authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false
}

# import_images loads each image archive into containerd unless the same
# archive was loaded before.
import_images() {
	marks=$STATE/containerd/plug-test-imports
	mkdir -p "$marks"
	for tar in "$CACHE/workload/pause-image.tar" "$CACHE/workload/workload-image.tar" \
		"$CACHE/coredns/coredns-image.tar" "$REPO/dist/plug-image.tar"; do
		[ -f "$tar" ] || {
			say "no $tar: $PLUG_IMAGE is not loaded (run ./build.sh image, then up.sh again)"
			continue
		}
		sum=$(sha256sum "$tar" | cut -d' ' -f1)
		mark=$marks/$(basename "$tar")
		[ "$(cat "$mark" 2>/dev/null)" != "$sum" ] || continue
		ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$tar" >/dev/null ||
			die "could not import $tar into containerd"
		echo "$sum" >"$mark"
		say "imported $(basename "$tar")"
	done
}

# start_registry starts the node's registry on REGISTRY (loopback) unless
# it runs. The kubelet pulls REGISTRY/... through containerd's CRI, which
# speaks plain HTTP to a registry on a loopback address with no
# configuration, so containerd's stays as it is.
start_registry() {
	pid_of registry >/dev/null && return 0
	mkdir -p "$STATE/registry" "$ETC"
	cat >"$ETC/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE/registry
http:
  addr: $REGISTRY
EOF
	start registry docker-registry serve "$ETC/registry.yml"
	wait_for 30 "the registry on $REGISTRY (logs in $LOGS)" curl -fsS -o /dev/null "http://$REGISTRY/v2/"
}

# push_plug_image pushes dist/plug-image.oci.tar to PLUG_REGISTRY_IMAGE
# unless the same archive was pushed before.
push_plug_image() {
	oci=$REPO/dist/plug-image.oci.tar
	mark=$STATE/registry/plug-test-pushed
	[ -f "$oci" ] || {
		say "no $oci: $PLUG_REGISTRY_IMAGE is not pushed (run ./build.sh image, then up.sh again)"
		return 0
	}
	sum=$(sha256sum "$oci" | cut -d' ' -f1)
	[ "$(cat "$mark" 2>/dev/null)" != "$sum" ] || return 0
	registry_variant "$REPO/dist/plug-image.tar" "$STATE/registry/plug-image.tar" ||
		die "could not make the registry's copy of $REPO/dist/plug-image.tar"
	skopeo copy --dest-tls-verify=false "docker-archive:$STATE/registry/plug-image.tar" "docker://$PLUG_REGISTRY_IMAGE" >"$LOGS/push.log" 2>&1 ||
		die "could not push to $PLUG_REGISTRY_IMAGE; see $LOGS/push.log"
	rm -f "$STATE/registry/plug-image.tar"
	echo "$sum" >"$mark"
	say "pushed $PLUG_REGISTRY_IMAGE"
}

# registry_variant writes to OUT the Docker archive IN with one label added
# to its config, so that the image pulled from the node's registry has an
# image ID of its own. The node's containerd (1.6) stops resolving an
# imported tag (plug:dev) once an image of the same ID has been pulled under
# another name, and every later pod of plug:dev then fails to pull.
registry_variant() {
	work=$(mktemp -d)
	tar -C "$work" -xf "$1" || { rm -rf "$work"; return 1; }
	old=$(sed -n 's/.*"Config":"\([0-9a-f]*\)\.json".*/\1/p' "$work/manifest.json")
	sed 's/"config":{/"config":{"Labels":{"dev.plug.test.copy":"registry"},/' "$work/$old.json" >"$work/new.json"
	new=$(sha256sum "$work/new.json" | cut -d' ' -f1)
	mv "$work/new.json" "$work/$new.json"
	rm "$work/$old.json"
	sed -i "s/$old/$new/" "$work/manifest.json"
	(cd "$work" && tar --owner=0 --group=0 --numeric-owner -cf "$2" manifest.json "$new.json" $(ls -d */))
	rc=$?
	rm -rf "$work"
	return $rc
}

node_ready() {
	[ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

coredns_answers() {
	"$CACHE/workload/workload" lookup -server "$DNS_IP:53" -timeout 1s kubernetes.default.svc.cluster.local |
		grep -qx "$API_SERVICE_IP"
}

write_env() {
	mkdir -p "$ENV_DIR"
	cp "$PKI/admin.kubeconfig" "$ENV_DIR/kube.kubeconfig.new"
	mv "$ENV_DIR/kube.kubeconfig.new" "$ENV_DIR/kube.kubeconfig"
	cp "$PKI/ca.crt" "$ENV_DIR/kube-ca.crt"
	plug_image=$PLUG_IMAGE
	[ -f "$REPO/dist/plug-image.tar" ] || plug_image=
	registry_image=$PLUG_REGISTRY_IMAGE
	[ -f "$STATE/registry/plug-test-pushed" ] || registry_image=
	cat >"$ENV_DIR/kube.env.new" <<EOF
# Written by testdata/cluster/up.sh; removed by down.sh.
KUBECONFIG=$ENV_DIR/kube.kubeconfig
KUBE_SERVER=https://$NODE_IP:6443
KUBE_CA=$ENV_DIR/kube-ca.crt
KUBE_TOKEN=$(cat "$PKI/admin.token")
KUBECTL=$KUBECTL
NODE_IP=$NODE_IP
NODE_NAME=$NODE_NAME
DNS_IP=$DNS_IP
PLUG_IMAGE=$plug_image
PLUG_REGISTRY_IMAGE=$registry_image
WORKLOAD_IMAGE=$WORKLOAD_IMAGE
PAUSE_IMAGE=$PAUSE_IMAGE
EOF
	mv "$ENV_DIR/kube.env.new" "$ENV_DIR/kube.env"
	install_kubectl_wrapper
}

# install_kubectl_wrapper puts kubectl on PATH for the demo, unless another
# kubectl is there.
install_kubectl_wrapper() {
	w=/usr/local/bin/kubectl
	if [ -e "$w" ] && ! grep -qs 'testdata/cluster' "$w"; then
		say "$w exists and is not ours; left alone"
		return 0
	fi
	cat >"$w.new" <<EOF
#!/bin/sh
# kubectl of the test cluster (testdata/cluster/up.sh); removed by down.sh.
: "\${KUBECONFIG:=$ENV_DIR/kube.kubeconfig}"
export KUBECONFIG
exec $KUBECTL "\$@"
EOF
	chmod 755 "$w.new"
	mv "$w.new" "$w"
}

need_root
if running; then
	"$HERE/build.sh"
	import_images
	start_registry
	push_plug_image
	write_env
	say "already up"
	exit 0
fi
if remnants; then
	say "an earlier cluster was not taken down; running down.sh first"
	"$HERE/down.sh" || say "down.sh reported differences (above); going on"
fi

install_packages
"$HERE/build.sh"
say "built"

rm -rf "$SNAPSHOT"
snapshot "$SNAPSHOT.new"
mv "$SNAPSHOT.new" "$SNAPSHOT"
install_guard
add_node_link
"$KUBE" pki -dir "$PKI" -node-name "$NODE_NAME" -node-ip "$NODE_IP" -service-ip "$API_SERVICE_IP"
write_configs
rm -rf "$STATE/etcd"
share_netns_dir
start_components
say "started"

wait_for 60 "containerd (logs in $LOGS)" ctr -a "$CONTAINERD_SOCK" version
import_images
start_registry
push_plug_image
wait_for 60 "kube-apiserver (logs in $LOGS)" kubectl_admin get --raw /readyz
say "apiserver ready"
start_controllers
kubectl_admin apply -f "$HERE/manifests/coredns.yaml" >/dev/null
wait_for 60 "node $NODE_NAME Ready (logs in $LOGS)" node_ready
say "node Ready"
wait_for 60 "CoreDNS (logs in $LOGS)" coredns_answers
write_env
say "CoreDNS answers; cluster up (env in $ENV_DIR/kube.env)"
