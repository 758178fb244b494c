# config.sh — writes the configuration of containerd, the CNI network, the
# kubelet and kube-proxy into $STATE/etc. Sourced after lib.sh by up.sh.

write_configs() {
	mkdir -p "$ETC/cni" "$STATE/cni"
	write_containerd
	write_cni
	write_kubelet
	write_kube_proxy
}

# containerd: its own root, state and socket, so it never meets another
# containerd on the machine (dockerd's). restrict_oom_score_adj is required
# here: the machine cannot lower oom_score_adj.
write_containerd() {
	cat >"$ETC/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd-opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ETC/cni"
    max_conf_num = 1
EOF
}

# The pod network: a bridge with the pods' gateway, masquerading what leaves
# the pod range, hairpin so a pod reaches itself through its Service.
write_cni() {
	cat >"$ETC/cni/10-plug-test.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "plug-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
EOF
}

# The kubelet: cgroup v1 with cgroupfs, webhook authentication and
# authorization, no image garbage collection (the images cannot be pulled
# again), eviction only when the machine is nearly full. resolvConf is empty:
# pods resolve cluster names only, nothing is forwarded off the machine.
write_kubelet() {
	cat >"$ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: ""
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
serializeImagePulls: false
maxPods: 110
nodeStatusReportFrequency: 10s
EOF
}

# kube-proxy in nftables mode. It leaves the conntrack sysctls alone, and
# serves NodePorts on the node address only.
write_kube_proxy() {
	cat >"$ETC/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection:
  kubeconfig: $PKI/kube-proxy.kubeconfig
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}
