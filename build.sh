#!/bin/sh
# build.sh — builds plug's binaries and its agent image, and runs its tests.
#
#   ./build.sh              binaries for every platform, then the image
#   ./build.sh binaries     dist/plug-<os>-<arch>[.exe] and dist/SHA256SUMS
#   ./build.sh image        the agent image, FROM scratch, for linux/amd64 and
#                           linux/arm64: /plug (runs `plug agent`), the CLI
#                           binaries it serves gzipped in /bin with the SHA256SUMS
#                           of the uncompressed ones, /var/lib/plug for its state;
#                           tagged plug:dev and plug:VERSION, or PLUG_IMAGE_TAGS
#                           (space-separated) when set. It writes
#                             dist/plug-image.tar        linux/amd64 Docker archive
#                             dist/plug-image.arm64.tar  linux/arm64 Docker archive
#                             dist/plug-image.oci.tar    OCI layout with an image
#                                                        index of both (for push)
#                             dist/gz/                   the gzipped CLI binaries
#   ./build.sh push REGISTRY/REPO:TAG
#                           copies dist/plug-image.oci.tar, both architectures,
#                           to a registry with skopeo (no Docker daemon); it logs
#                           in as `skopeo login` did; plain HTTP only to a
#                           registry on 127.0.0.1 or localhost
#   ./build.sh release      dist/ from scratch for the commit checked out (a clean
#                           tree): every binary, the image archives, the man
#                           page (dist/plug.1), an SBOM of the Go modules
#                           (dist/plug.cdx.json, CycloneDX) and SHA256SUMS of
#                           all of it; the version is the tag
#                           vX.Y.Z on the commit (git describe), or PLUG_VERSION
#   ./build.sh reproducible builds the release twice, here and in a fresh clone
#                           of the commit elsewhere with an empty build cache,
#                           and fails unless every file of both is
#                           byte-identical and the SBOM lists exactly the
#                           modules `go version -m` reports
#   ./build.sh vet          go vet for linux, darwin and windows
#   ./build.sh test         the whole test suite on a real local Kubernetes and
#                           Docker Swarm: installs what is missing (the SMB
#                           clients: testdata/smb/deps.sh; Chromium for the
#                           page: testdata/ui/deps.sh), starts both,
#                           runs every test, tears both down (run as root);
#                           PLUG_TEST_LOAD=N runs N busy CPU workers beside
#                           it all, so that a test that passes only on a
#                           quiet machine fails here first
#   ./build.sh demo         plug doing its job on the local Kubernetes, narrated
#                           (run as root)
#   ./build.sh bench [--quick] [--no-build] [--only-start | --only-udp]
#                           the benchmark: plug against raw TCP and OpenSSH on
#                           the local Kubernetes (testdata/bench; run as root)
#   ./build.sh bench --scale [--counts N,N,...] [--runs N] [--no-build]
#                           plug's cost against the number of Services and
#                           runs (testdata/bench/scale.sh; run as root)
#   ./build.sh mkimage ROOTFS OUT.tar NAME:TAG...
#                           packs a directory into a FROM-scratch Docker archive
#                           that `docker load` and `ctr images import` accept;
#                           MKIMAGE_ENTRYPOINT (default /plug) and MKIMAGE_CMD
#                           (arguments, space-separated, default none) set how it starts;
#                           MKIMAGE_ENV (NAME=VALUE items, space-separated) its ENV
#
# Builds are reproducible: -trimpath, no VCS stamp of go build (-buildvcs=false;
# the commit and its time are stamped instead, for `plug version`), and archives with fixed owners,
# order and times, so two builds of one commit are byte-identical.
set -eu

cd "$(dirname "$0")"
# VERSION is the tag vX.Y.Z on the commit, else git's description of the
# commit (a hash, with -dirty for uncommitted changes), else dev.
VERSION=${PLUG_VERSION:-$(git describe --tags --match 'v[0-9]*.[0-9]*.[0-9]*' --dirty 2>/dev/null ||
	git describe --always --dirty 2>/dev/null || echo dev)}
# COMMIT and BUILD_TIME: the commit's hash (-dirty with uncommitted
# changes) and its committer time, which `plug version` prints.
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain 2>/dev/null)" ] || COMMIT=$COMMIT-dirty
BUILD_TIME=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo unknown)
PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"
IMAGE_ARCHES="amd64 arm64"

die() {
	echo "build.sh: $*" >&2
	exit 1
}

# binary_names prints the file name of each platform's binary in dist/.
binary_names() {
	for p in $PLATFORMS; do
		n=plug-${p%/*}-${p#*/}
		[ "${p%/*}" = windows ] && n=$n.exe
		echo "$n"
	done
}

binaries() {
	mkdir -p dist
	for p in $PLATFORMS; do
		os=${p%/*} arch=${p#*/}
		out=dist/plug-$os-$arch
		[ "$os" = windows ] && out=$out.exe
		CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
			-ldflags "-s -w -buildid= -X plug/tunnel.Version=$VERSION -X plug/tunnel.Commit=$COMMIT -X plug/tunnel.BuildTime=$BUILD_TIME" -o "$out" .
	done
	(cd dist && sha256sum $(binary_names) >SHA256SUMS)
}

# pack_layer DIR WORK packs DIR as an image layer into WORK/ID.tar, with
# fixed owners, order and times, DIR itself 0755 as the image's /; it
# prints ID, the layer's SHA-256.
pack_layer() {
	chmod 755 "$1"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$1" -cf "$2/layer.tar" .
	id=$(sha256sum "$2/layer.tar" | cut -d' ' -f1)
	mv "$2/layer.tar" "$2/$id.tar"
	echo "$id"
}

# image_config ARCH LAYER... prints the image configuration of a linux/ARCH
# image of the layers (IDs from pack_layer), starting as MKIMAGE_ENTRYPOINT
# (default /plug) with MKIMAGE_CMD and MKIMAGE_ENV, as uid 65532 (any other
# uid works too: nothing in it needs a particular one).
image_config() {
	arch=$1
	shift
	entry=${MKIMAGE_ENTRYPOINT:-/plug}
	cmd= env= ids=
	for a in ${MKIMAGE_CMD:-}; do cmd="$cmd\"$a\","; done
	for e in ${MKIMAGE_ENV:-}; do env="$env\"$e\","; done
	for l in "$@"; do ids="$ids\"sha256:$l\","; done
	printf '{"architecture":"%s","os":"linux","config":{"User":"65532","Env":[%s],"Entrypoint":["%s"],"Cmd":[%s],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":[%s]}}' \
		"$arch" "${env%,}" "$entry" "${cmd%,}" "${ids%,}"
}

# docker_archive WORK CONFIG OUT TAGS LAYER... writes the Docker archive
# (`docker load`, `ctr images import`) of the image whose configuration is
# in file CONFIG and whose layers are WORK/LAYER.tar, tagged with TAGS
# (space-separated NAME:TAG).
docker_archive() {
	work=$1 config=$2 out=$3 tags=$4
	shift 4
	arc=$(mktemp -d "$work/archive.XXXXXX")
	cid=$(sha256sum "$config" | cut -d' ' -f1)
	cp "$config" "$arc/$cid.json"
	layers=
	for l in "$@"; do
		mkdir -p "$arc/$l"
		ln "$work/$l.tar" "$arc/$l/layer.tar" 2>/dev/null || cp "$work/$l.tar" "$arc/$l/layer.tar"
		layers="$layers\"$l/layer.tar\","
	done
	t=
	for tag in $tags; do t="$t\"$tag\","; done
	printf '[{"Config":"%s.json","RepoTags":[%s],"Layers":[%s]}]\n' "$cid" "${t%,}" "${layers%,}" >"$arc/manifest.json"
	# shellcheck disable=SC2046 # the top-level names are words
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$arc" -cf "$out" $(ls "$arc")
	rm -rf "$arc"
}

# mkimage ROOTFS OUT.tar NAME:TAG... writes a one-layer linux/amd64 Docker
# archive with ROOTFS as its filesystem (see image_config).
mkimage() {
	rootfs=$1 out=$2
	shift 2
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	layer=$(pack_layer "$rootfs" "$work")
	image_config amd64 "$layer" >"$work/config"
	docker_archive "$work" "$work/config" "$out" "$*" "$layer"
}

# oci_blob LAYOUT FILE MEDIATYPE moves FILE into the OCI layout's blobs and
# prints its descriptor.
oci_blob() {
	sum=$(sha256sum "$2" | cut -d' ' -f1)
	size=$(wc -c <"$2" | tr -d ' ')
	mv "$2" "$1/blobs/sha256/$sum"
	printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$3" "$sum" "$size"
}

image() {
	binaries
	work=$(mktemp -d)
	# The layer both architectures share: the CLI binaries, gzipped, with
	# the SHA-256 of each uncompressed binary, and the state directories.
	common=$work/common
	mkdir -p "$common/bin" "$common/tmp" "$common/var/lib/plug"
	chmod 1777 "$common/tmp" "$common/var/lib/plug"
	rm -rf dist/gz
	mkdir -p dist/gz
	for b in $(binary_names); do
		gzip -9 -n -c "dist/$b" >"dist/gz/$b.gz"
		cp "dist/gz/$b.gz" "$common/bin/"
	done
	cp dist/SHA256SUMS "$common/bin/"
	shared=$(pack_layer "$common" "$work")
	tags=${PLUG_IMAGE_TAGS:-plug:dev}
	[ "$VERSION" = dev ] || [ -n "${PLUG_IMAGE_TAGS:-}" ] || tags="plug:$VERSION $tags"

	oci=$work/oci
	mkdir -p "$oci/blobs/sha256"
	manifests=
	for arch in $IMAGE_ARCHES; do
		mkdir "$work/agent-$arch"
		cp "dist/plug-linux-$arch" "$work/agent-$arch/plug"
		agent=$(pack_layer "$work/agent-$arch" "$work")
		MKIMAGE_CMD=agent image_config "$arch" "$shared" "$agent" >"$work/config-$arch"
		out=dist/plug-image.$arch.tar
		[ "$arch" = amd64 ] && out=dist/plug-image.tar
		docker_archive "$work" "$work/config-$arch" "$out" "$tags" "$shared" "$agent"

		descs=
		for l in "$shared" "$agent"; do
			[ -f "$work/$l.tar.gz" ] || gzip -9 -n -c "$work/$l.tar" >"$work/$l.tar.gz"
			cp "$work/$l.tar.gz" "$work/blob"
			descs="$descs$(oci_blob "$oci" "$work/blob" application/vnd.oci.image.layer.v1.tar+gzip),"
		done
		config=$(oci_blob "$oci" "$work/config-$arch" application/vnd.oci.image.config.v1+json)
		printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' \
			"$config" "${descs%,}" >"$work/manifest"
		m=$(oci_blob "$oci" "$work/manifest" application/vnd.oci.image.manifest.v1+json)
		manifests="$manifests${m%\}},\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"}},"
	done
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "${manifests%,}" >"$work/index"
	index=$(oci_blob "$oci" "$work/index" application/vnd.oci.image.index.v1+json)
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' "$index" >"$oci/index.json"
	printf '{"imageLayoutVersion":"1.0.0"}\n' >"$oci/oci-layout"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$oci" -cf dist/plug-image.oci.tar blobs index.json oci-layout
	rm -rf "$work"
}

# push REF copies the OCI index, both architectures, to REF
# (REGISTRY/REPO:TAG) with skopeo.
push() {
	ref=${1:-}
	case $ref in
	*/*:*) ;;
	*)
		echo "build.sh: push takes REGISTRY/REPO:TAG, such as registry.example.com/plug:v1.2.3, not '$ref'" >&2
		exit 2
		;;
	esac
	[ -f dist/plug-image.oci.tar ] || die "no dist/plug-image.oci.tar: run ./build.sh image first"
	command -v skopeo >/dev/null || die "skopeo is not installed (Debian: apt-get install skopeo)"
	tls=true
	case ${ref%%/*} in
	127.0.0.1:* | localhost:* | 127.0.0.1 | localhost) tls=false ;;
	esac
	skopeo copy --all --dest-tls-verify=$tls oci-archive:dist/plug-image.oci.tar "docker://$ref"
}

# sbom prints a CycloneDX SBOM of the Go modules of the binaries in dist/,
# as `go version -m` reports them: plug itself, the Go toolchain and each
# dependency (module path, version and go.sum hash).
sbom() {
	cd dist
	# shellcheck disable=SC2046 # the names are words
	go version -m $(binary_names) | awk -v version="$VERSION" '
	NR == 1 { sub(/^[^:]*: /, ""); golang = $1 }
	$1 == "dep" && !seen[$2 " " $3]++ { deps[++n] = $2 "\t" $3 "\t" $4 }
	END {
		printf "{\"bomFormat\":\"CycloneDX\",\"specVersion\":\"1.5\",\"version\":1,\"metadata\":{\"component\":{\"type\":\"application\",\"name\":\"plug\",\"version\":\"%s\"},\"properties\":[{\"name\":\"go\",\"value\":\"%s\"}]},\"components\":[", version, golang
		for (i = 1; i <= n; i++) {
			split(deps[i], d, "\t")
			printf "%s{\"type\":\"library\",\"name\":\"%s\",\"version\":\"%s\",\"purl\":\"pkg:golang/%s@%s\",\"properties\":[{\"name\":\"go.sum\",\"value\":\"%s\"}]}", (i > 1 ? "," : ""), d[1], d[2], d[1], d[2], d[3]
		}
		print "]}"
	}'
	cd ..
}

release() {
	[ -z "$(git status --porcelain 2>/dev/null)" ] || [ -n "${PLUG_VERSION:-}" ] ||
		die "the tree has uncommitted changes: commit them (and tag vX.Y.Z) first, or set PLUG_VERSION"
	rm -rf dist
	image
	sbom >dist/plug.cdx.json
	"dist/plug-$(go env GOOS)-$(go env GOARCH)" help --man >dist/plug.1
	(cd dist && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
	echo "build.sh: release $VERSION in dist/ (SHA256SUMS, SBOM plug.cdx.json, man page plug.1)" >&2
}

# sbom_check fails unless dist/plug.cdx.json lists exactly the modules
# `go version -m` reports for the binaries in dist/.
sbom_check() {
	# shellcheck disable=SC2046 # the names are words
	reported=$(cd dist && go version -m $(binary_names) | awk '$1 == "dep" { print $2 "@" $3 }' | LC_ALL=C sort -u)
	listed=$(grep -o '"purl":"pkg:golang/[^"]*"' dist/plug.cdx.json | sed 's|.*pkg:golang/||; s|"$||' | LC_ALL=C sort -u)
	[ -n "$reported" ] && [ "$reported" = "$listed" ] ||
		die "the SBOM lists [$listed], go version -m reports [$reported]"
}

reproducible() {
	[ -z "$(git status --porcelain 2>/dev/null)" ] || die "reproducible builds the commit: commit the changes first"
	head=$(git rev-parse HEAD)
	other=$(mktemp -d)
	trap 'rm -rf "$other"' EXIT
	git clone -q --no-local . "$other/plug"
	# The other build starts from an empty build cache: nothing of this one
	# is reused.
	(cd "$other/plug" && git checkout -q "$head" && GOCACHE="$other/gocache" ./build.sh release)
	release
	sbom_check
	diff -r dist "$other/plug/dist" || die "two builds of $(git rev-parse --short HEAD) differ (above)"
	echo "build.sh: two builds of $VERSION are byte-identical: $(wc -l <dist/SHA256SUMS) files" >&2
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
	testdata/ui/deps.sh
	image
	testdata/cluster/up.sh
	testdata/swarm/up.sh
	trap 'load_stop; clusters_down || exit 1' EXIT
	vet
	go test -count=1 -timeout 30m ./...
	for m in testdata/workload testdata/cluster testdata/swarm testdata/bench testdata/ui; do
		(cd "$m" && go test -count=1 -timeout 30m ./...)
	done
}

case "${1:-all}" in
all) image ;;
binaries) binaries ;;
image) image ;;
push) shift && push "$@" ;;
release) release ;;
reproducible) reproducible ;;
vet) vet ;;
test) test_all ;;
demo) image && testdata/cluster/up.sh && exec testdata/demo/run.sh ;;
bench)
	shift
	[ "${1:-}" != --scale ] || { shift && exec testdata/bench/scale.sh "$@"; }
	exec testdata/bench/run.sh "$@"
	;;
mkimage) shift && mkimage "$@" ;;
*)
	echo "build.sh: unknown command ${1}; see the top of build.sh for the commands" >&2
	exit 2
	;;
esac
