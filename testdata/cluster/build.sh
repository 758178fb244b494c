#!/bin/sh
# build.sh — builds what the cluster runs, rebuilding only what changed (each
# build is stamped with a hash of its sources):
#
#   $PLUG_TEST_CACHE/kube/kube                  the multi-call Kubernetes binary
#   $PLUG_TEST_CACHE/kube/kubectl               a link to it
#   $PLUG_TEST_CACHE/coredns/coredns-image.tar  plug-test/coredns:1
#   $PLUG_TEST_CACHE/workload/*-image.tar       plug-test/workload:1, plug-test/pause:1
#
# PLUG_TEST_CACHE defaults to /var/cache/plug-test. up.sh runs it.
set -eu
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

command -v go >/dev/null || die "needs Go 1.26 on PATH (https://go.dev/dl/) to build the cluster"

# stamp DIR PATTERNS... prints a hash of the Go toolchain and the files in
# DIR that the (quoted) glob patterns match.
stamp() {
	dir=$1
	shift
	(go version && cd "$dir" && cat $*) | sha256sum | cut -d' ' -f1
}

# fresh STAMPFILE HASH OUTPUTS... succeeds when every output exists and was
# built from sources with this hash.
fresh() {
	file=$1 hash=$2
	shift 2
	[ -f "$file" ] && [ "$(cat "$file")" = "$hash" ] || return 1
	for o in "$@"; do [ -e "$o" ] || return 1; done
}

build_kube() {
	hash=$(stamp "$HERE/kube" go.mod go.sum '*.go')
	fresh "$BIN/stamp" "$hash" "$KUBE" && return 0
	say "building kube (Kubernetes v1.37.2 and etcd; about 10 minutes the first time)"
	mkdir -p "$BIN"
	v=k8s.io/component-base/version
	(cd "$HERE/kube" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X $v.gitVersion=v1.37.2 -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean" \
		-o "$KUBE.new" .)
	mv "$KUBE.new" "$KUBE"
	ln -sf kube "$KUBECTL"
	echo "$hash" >"$BIN/stamp"
	say "built $KUBE"
}

build_coredns() {
	out=$CACHE/coredns
	hash=$(stamp "$HERE/coredns" go.mod go.sum main.go)
	fresh "$out/stamp" "$hash" "$out/coredns-image.tar" && return 0
	say "building CoreDNS v1.15.0 (about 3 minutes the first time)"
	mkdir -p "$out"
	root=$(mktemp -d)
	(cd "$HERE/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$root/coredns" .)
	MKIMAGE_ENTRYPOINT=/coredns "$REPO/build.sh" mkimage "$root" "$out/coredns-image.tar" "$COREDNS_IMAGE"
	rm -rf "$root"
	echo "$hash" >"$out/stamp"
	say "built $COREDNS_IMAGE"
}

"$REPO/testdata/workload/images.sh" "$CACHE/workload"
build_coredns
build_kube
