#!/bin/sh
# scale.sh [--counts 1,100,1000] [--runs 200] [--runs-at N] [--starts 10] [--no-build] —
# how plug's cost follows the cluster's size (./build.sh bench --scale).
#
# Deploys the agent of deploy/plug-k8s.yaml in a namespace of its own
# (plug-scale, or PLUG_SCALE_NS) on the local Kubernetes (which must be
# up), and from this machine, as root: fills the namespace with headless
# Services up to each count and measures `plug -c -- true` and the agent's
# memory; then, at --runs-at Services (default: the most), starts --runs
# runs and creates one Service while they are connected (benchtool names). Writes
# out/scale.csv, out/SCALE.md and out/scale.svg, and puts the section and
# the plot into RESULTS.md and scale.svg beside this file. The namespace,
# with every Service it made, is deleted at the end, on failure too.
#
# PLUG_BENCH_IMAGE names the agent's image (default: the cluster's,
# plug:dev); with it set, dist/plug-image.tar must hold that tag and is
# imported as it.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/lib.sh"
KNS=${PLUG_SCALE_NS:-plug-scale}

COUNTS=1,100,1000 RUNS=200 RUNS_AT=0 STARTS=10 BUILD=1
while [ $# -gt 0 ]; do
	case $1 in
	--counts) COUNTS=$2 && shift ;;
	--runs) RUNS=$2 && shift ;;
	--runs-at) RUNS_AT=$2 && shift ;;
	--starts) STARTS=$2 && shift ;;
	--no-build) BUILD=0 ;;
	*) die "unknown argument $1; use --counts N,N,..., --runs N, --runs-at N, --starts N, --no-build" ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || die "run as root: the runs' names helper and the agent's /proc are read as root"
[ -f "$KUBE_ENV" ] || die "the local Kubernetes is not up (no $KUBE_ENV): testdata/cluster/up.sh"

started=$(date +%s)
WORK=$(mktemp -d /tmp/plugscale.XXXXXX)
scale_cleanup() {
	rc=$?
	set +e
	if [ -n "${KUBECTL:-}" ] && $KUBECTL get ns "$KNS" >/dev/null 2>&1; then
		$KUBECTL delete ns "$KNS" --timeout=300s >/dev/null || say "namespace $KNS is still being deleted"
	fi
	rm -rf "$WORK"
	exit $rc
}
trap scale_cleanup EXIT
trap 'exit 130' INT TERM

[ "$BUILD" = 0 ] || "$repo/build.sh" image
. "$KUBE_ENV"
export KUBECONFIG
KUBECTL=${KUBECTL:-kubectl}
if [ -n "${PLUG_BENCH_IMAGE:-}" ]; then
	ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$repo/dist/plug-image.tar" >/dev/null ||
		die "could not import dist/plug-image.tar into the cluster's containerd"
	PLUG_IMAGE=$PLUG_BENCH_IMAGE
fi
TOOL=$WORK/benchtool
(cd "$here" && CGO_ENABLED=0 go build -trimpath -o "$TOOL" .)
PLUG=$repo/dist/plug-linux-amd64

# One key stands for the many developers the runs would belong to.
deploy_agent PLUG_MAX_RUNS_PER_KEY=$((RUNS + 16)) PLUG_MAX_CONNECTIONS_PER_KEY=$((2 * RUNS + 32)) \
	PLUG_MAX_RUNS=$((RUNS + 64)) PLUG_MAX_CONNECTIONS=$((2 * RUNS + 256))
mkdir -p "$WORK/home" "$OUT/logs"
hostkey=
for _ in $(seq 60); do
	hostkey=$(ssh-keyscan -T 2 -t ed25519 -p "$NODEPORT" "$NODE_IP" 2>/dev/null | awk '{print $2" "$3}')
	[ -n "$hostkey" ] && break
	sleep 1
done
[ -n "$hostkey" ] || die "the agent does not answer on $NODE_IP:$NODEPORT"
HOME=$WORK/home "$PLUG" profile add scale --host "$NODE_IP" --port "$NODEPORT" --user scale --host-key "$hostkey" >/dev/null
HOME=$WORK/home "$PLUG" keygen -p scale >/dev/null

say "measuring with $COUNTS Services and $RUNS runs in namespace $KNS"
"$TOOL" names -counts "$COUNTS" -runs "$RUNS" -runs-at "$RUNS_AT" -starts "$STARTS" -plug "$PLUG" -tool "$TOOL" -home "$WORK/home" \
	-kubectl "$KUBECTL" -ns "$KNS" -work "$OUT/logs" >"$OUT/scale.csv"
shown="./build.sh bench --scale --counts $COUNTS --runs $RUNS"
[ "$RUNS_AT" = 0 ] || shown="$shown --runs-at $RUNS_AT"
"$TOOL" scalereport -csv "$OUT/scale.csv" -svg "$OUT/scale.svg" -command "$shown" >"$OUT/SCALE.md"
cat "$OUT/SCALE.md"

# RESULTS.md keeps the last section between its markers.
cp "$OUT/scale.svg" "$here/scale.svg"
awk -v section="$OUT/SCALE.md" '
	/^<!-- scale -->$/ { print; while ((getline line < section) > 0) print line; skip = 1; next }
	/^<!-- \/scale -->$/ { skip = 0 }
	!skip { print }
' "$here/RESULTS.md" >"$WORK/RESULTS.md"
grep -q '^<!-- scale -->$' "$here/RESULTS.md" ||
	{ printf '\n<!-- scale -->\n' && cat "$OUT/SCALE.md" && printf '<!-- /scale -->\n'; } >>"$WORK/RESULTS.md"
cp "$WORK/RESULTS.md" "$here/RESULTS.md"
say "wrote $OUT/scale.csv, $OUT/SCALE.md, RESULTS.md's section and scale.svg in $(($(date +%s) - started)) s"
