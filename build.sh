#!/bin/sh
# build.sh — builds plug's binaries and its agent image, and runs its tests.
#
#   ./build.sh              binaries for every platform, then the image
#   ./build.sh binaries     dist/plug-<os>-<arch>[.exe] and dist/SHA256SUMS
#   ./build.sh image        dist/plug-image.tar (a Docker archive, FROM scratch):
#                           /plug (linux/amd64, runs `plug agent`), the CLI
#                           binaries it serves in /bin, /var/lib/plug for its state;
#                           tagged plug:dev and plug:VERSION, or PLUG_IMAGE_TAGS
#                           (space-separated) when set
#   ./build.sh vet          go vet for linux, darwin and windows
#   ./build.sh test         the whole test suite on a real local Kubernetes and
#                           Docker Swarm: installs what is missing (the SMB
#                           clients: testdata/smb/deps.sh), starts both,
#                           runs every test, tears both down (run as root);
#                           PLUG_TEST_LOAD=N runs N busy CPU workers beside
#                           it all, so that a test that passes only on a
#                           quiet machine fails here first
#   ./build.sh demo         plug doing its job on the local Kubernetes, narrated
#                           (run as root)
#   ./build.sh bench [--quick] [--no-build]
#                           the benchmark: plug against raw TCP and OpenSSH on
#                           the local Kubernetes (testdata/bench; run as root)
#   ./build.sh mkimage ROOTFS OUT.tar NAME:TAG...
#                           packs a directory into a FROM-scratch Docker archive
#                           that `docker load` and `ctr images import` accept;
#                           MKIMAGE_ENTRYPOINT (default /plug) and MKIMAGE_CMD
#                           (arguments, space-separated, default none) set how it starts;
#                           MKIMAGE_ENV (NAME=VALUE items, space-separated) its ENV
set -eu

cd "$(dirname "$0")"
VERSION=${PLUG_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"

binaries() {
	mkdir -p dist
	for p in $PLATFORMS; do
		os=${p%/*} arch=${p#*/}
		out=dist/plug-$os-$arch
		[ "$os" = windows ] && out=$out.exe
		CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
			-ldflags "-s -w -X plug/tunnel.Version=$VERSION" -o "$out" .
	done
	(cd dist && sha256sum plug-*-* >SHA256SUMS)
}

# mkimage ROOTFS OUT.tar NAME:TAG... writes a one-layer linux/amd64 image with
# ROOTFS as its filesystem and ROOTFS/plug as its entrypoint, running as uid
# 65532 (any other uid works too: nothing in it needs a particular one).
# ROOTFS itself becomes the image's /, so it is made 0755 first.
mkimage() {
	rootfs=$1 out=$2
	shift 2
	chmod 755 "$rootfs"
	tags=$(printf '"%s",' "$@")
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
		-C "$rootfs" -cf "$work/layer.tar" .
	layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
	mkdir "$work/$layer"
	mv "$work/layer.tar" "$work/$layer/layer.tar"
	entry=${MKIMAGE_ENTRYPOINT:-/plug}
	cmd= env=
	for a in ${MKIMAGE_CMD:-}; do cmd="$cmd\"$a\","; done
	for e in ${MKIMAGE_ENV:-}; do env="$env\"$e\","; done
	cat >"$work/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"User":"65532","Env":[${env%,}],"Entrypoint":["$entry"],"Cmd":[${cmd%,}],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$layer"]}}
EOF
	config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
	mv "$work/config.json" "$work/$config.json"
	cat >"$work/manifest.json" <<EOF
[{"Config":"$config.json","RepoTags":[${tags%,}],"Layers":["$layer/layer.tar"]}]
EOF
	tar --owner=0 --group=0 --numeric-owner -C "$work" -cf "$out" manifest.json "$config.json" "$layer"
}

image() {
	binaries
	root=$(mktemp -d)
	mkdir -p "$root/bin" "$root/tmp" "$root/var/lib/plug"
	chmod 1777 "$root/tmp" "$root/var/lib/plug"
	cp dist/plug-linux-amd64 "$root/plug"
	cp dist/plug-*-* dist/SHA256SUMS "$root/bin/"
	tags=${PLUG_IMAGE_TAGS:-plug:dev}
	[ "$VERSION" = dev ] || [ -n "${PLUG_IMAGE_TAGS:-}" ] || tags="plug:$VERSION $tags"
	# shellcheck disable=SC2086 # tags are words
	(MKIMAGE_CMD=agent mkimage "$root" dist/plug-image.tar $tags)
	rm -rf "$root"
}

vet() {
	for os in linux darwin windows; do
		GOOS=$os go vet ./...
	done
}

# clusters_down tears the local clusters down, Swarm first (it was started
# last), and fails if either leaves the machine other than it found it.
clusters_down() {
	rc=0
	testdata/swarm/down.sh || rc=1
	testdata/cluster/down.sh || rc=1
	return $rc
}

# load_start starts PLUG_TEST_LOAD busy workers (none by default): shells
# that spin at the tests' own priority until load_stop, taking that many
# CPUs from everything the tests start.
load_start() {
	LOAD_PIDS=
	n=${PLUG_TEST_LOAD:-0}
	case $n in
	'' | *[!0-9]*)
		echo "build.sh: PLUG_TEST_LOAD must be a number of busy CPU workers, such as 2, not '$n'" >&2
		exit 2
		;;
	esac
	i=0
	while [ "$i" -lt "$n" ]; do
		sh -c 'while :; do :; done' &
		LOAD_PIDS="$LOAD_PIDS $!"
		i=$((i + 1))
	done
	[ "$n" -eq 0 ] || echo "build.sh: $n busy CPU workers run beside the tests (PLUG_TEST_LOAD)" >&2
}

load_stop() {
	# shellcheck disable=SC2086 # the pids are words
	[ -z "$LOAD_PIDS" ] || kill $LOAD_PIDS 2>/dev/null || true
}

test_all() {
	load_start
	trap 'load_stop' EXIT
	testdata/smb/deps.sh
	image
	testdata/cluster/up.sh
	testdata/swarm/up.sh
	trap 'load_stop; clusters_down || exit 1' EXIT
	vet
	go test -count=1 -timeout 30m ./...
	for m in testdata/workload testdata/cluster testdata/swarm testdata/bench; do
		(cd "$m" && go test -count=1 -timeout 30m ./...)
	done
}

case "${1:-all}" in
all) image ;;
binaries) binaries ;;
image) image ;;
vet) vet ;;
test) test_all ;;
demo) image && testdata/cluster/up.sh && exec testdata/demo/run.sh ;;
bench) shift && exec testdata/bench/run.sh "$@" ;;
mkimage) shift && mkimage "$@" ;;
*)
	echo "build.sh: unknown command ${1}; see the top of build.sh for the commands" >&2
	exit 2
	;;
esac
