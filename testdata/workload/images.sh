#!/bin/sh
# images.sh [OUTDIR] — builds the workload binary and the two FROM-scratch
# test images made from it, rebuilding only when this module's sources change:
#
#   OUTDIR/workload            the static binary
#   OUTDIR/workload-image.tar  plug-test/workload:1  (entrypoint /workload; /usr/bin/env
#                              and /bin/cat are it too, and its ENV is $WORKLOAD_ENV;
#                              WORKLOAD_IMAGE_TAG names another tag)
#   OUTDIR/pause-image.tar     plug-test/pause:1     (entrypoint /pause)
#
# Both archives load with `docker load -i` and `ctr -n k8s.io images import`.
# OUTDIR defaults to $PLUG_TEST_CACHE/workload (PLUG_TEST_CACHE defaults to
# /var/cache/plug-test).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-${PLUG_TEST_CACHE:-/var/cache/plug-test}/workload}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The workload image's ENV, as an image built FROM a base image has one:
# tests of environments read it back from the running container.
WORKLOAD_ENV="PATH=/usr/local/bin:/usr/bin:/bin WORKLOAD_IMAGE_ENV=baked-into-the-image"

stamp=$(cd "$here" && cat go.mod images.sh $(ls *.go | grep -v _test.go) | sha256sum | cut -d' ' -f1)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] &&
	[ -f "$out/workload-image.tar" ] && [ -f "$out/pause-image.tar" ]; then
	exit 0
fi
rm -f "$out/stamp"

(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/workload" .)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp "$out/workload" "$root/workload"
mkdir -p "$root/usr/bin" "$root/bin"
ln -s /workload "$root/usr/bin/env"
ln -s /workload "$root/bin/cat"
MKIMAGE_ENTRYPOINT=/workload MKIMAGE_ENV="$WORKLOAD_ENV" "$repo/build.sh" mkimage "$root" "$out/workload-image.tar" "${WORKLOAD_IMAGE_TAG:-plug-test/workload:1}"
rm -r "$root/usr" "$root/bin"
mv "$root/workload" "$root/pause"
MKIMAGE_ENTRYPOINT=/pause "$repo/build.sh" mkimage "$root" "$out/pause-image.tar" plug-test/pause:1
echo "$stamp" >"$out/stamp"
echo "images.sh: built plug-test/workload:1 and plug-test/pause:1 in $out" >&2
