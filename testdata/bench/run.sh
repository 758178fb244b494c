#!/bin/sh
# run.sh [--quick] [--no-build] [--only-start | --only-udp] — plug's benchmark (./build.sh bench).
#
# Measures plug's tunnel side by side with raw TCP and OpenSSH on the local
# Kubernetes of testdata/cluster (started when it is not up; left running),
# from a "laptop": a network namespace joined to the machine by a link
# that gives each profile:
#
#   none   a veth pair, as fast as the kernel goes
#   wan    20 ms round trip (10 ms each way) and 0.1 % packet loss each way,
#          by tc netem, or where the kernel has no sch_netem by a small
#          user-space link (benchtool link, two TUN devices)
#   wan100 100 ms round trip (50 ms each way) and 0.1 % loss, the same way;
#          only the paths (throughput, latency, setup, concurrency)
#
# Writes testdata/bench/out/bench.csv and out/RESULTS.md (the table, the
# machine, the command; a full run without failures copies it to
# RESULTS.md beside this file, for the README) and prints the table; the
# logs of the processes it ran are in out/logs. Run as root. Everything it
# creates (the laptop's namespace and link, the sshd, the Kubernetes
# namespace, the processes) is removed at the end, on failure too.
# README.md beside this file explains the set-up and the measurements.
#
#   --quick      64 MiB transfers and fewer iterations, for a run in minutes
#   --no-build   use dist/ and the bench tool as they are
#   --only-start session start only, on loopback and at 20 ms (with --quick
#                3 runs of each kind, else 10); no footprint
#   --only-udp   UDP throughput only, beside plug's TCP throughput, on
#                loopback and at 20 ms; no footprint
#
# PLUG_BENCH_IMAGE names the agent's image (default: the cluster's,
# plug:dev); with it set, dist/plug-image.tar must hold that tag
# (PLUG_IMAGE_TAGS=... ./build.sh image) and is imported as it.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/lib.sh"

QUICK=0 BUILD=1 ONLY_START=0 ONLY_UDP=0
for a in "$@"; do
	case $a in
	--quick) QUICK=1 ;;
	--no-build) BUILD=0 ;;
	--only-start) ONLY_START=1 ;;
	--only-udp) ONLY_UDP=1 ;;
	*) die "unknown argument $a; use --quick, --no-build, --only-start or --only-udp" ;;
	esac
done
[ "$(id -u)" = 0 ] || die "run as root: it creates a network namespace and its link"

started=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
rm -rf "$OUT/logs"
mkdir -p "$OUT/logs" "$CACHE"
WORK=$(mktemp -d /tmp/plugbench.XXXXXX)
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$BUILD" = 1 ]; then
	say "building plug (binaries, image) and the bench tool"
	"$repo/build.sh" image
fi
build_tool
bring_up_cluster
sshd_binary
make_laptop
start_sshd
deploy

CSV=$OUT/bench.csv
echo "profile,path,metric,value" >"$CSV"
profiles="none wan wan100"
[ "$ONLY_START" = 0 ] && [ "$ONLY_UDP" = 0 ] || profiles="none wan"
for profile in $profiles; do
	link_up "$profile"
	[ -n "${PLUG:-}" ] || laptop_profile
	say "profile $profile: measuring"
	drive "$profile" || FAILED=1
	link_down
done
if [ "$ONLY_START" = 0 ] && [ "$ONLY_UDP" = 0 ]; then
	say "footprint"
	"$TOOL" footprint -dist "$repo/dist" -module "$repo" >>"$CSV"
fi

"$TOOL" report -csv "$CSV" -machine "$(machine)" -wan "$WAN_LINK" -command "./build.sh bench$(args_shown "$@")" \
	-took "$(($(date +%s) - started))" -load "$load_start; at the end $(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/RESULTS.md"
cat "$OUT/RESULTS.md"
# A full run that measured everything is the one the README shows. The
# section scale.sh wrote (between its markers) and the one the tests'
# figures are in ("## Measured by the tests") are kept.
if [ "$QUICK" = 0 ] && [ "$ONLY_START" = 0 ] && [ "$ONLY_UDP" = 0 ] && [ -z "${FAILED:-}" ]; then
	sed -n '/^<!-- scale -->$/,/^<!-- \/scale -->$/p' "$here/RESULTS.md" >"$WORK/scale-section"
	sed -n '/^## Measured by the tests$/,$p' "$here/RESULTS.md" | sed '/^<!-- scale -->$/,/^<!-- \/scale -->$/d' >"$WORK/tests-section"
	cp "$OUT/RESULTS.md" "$here/RESULTS.md"
	[ ! -s "$WORK/scale-section" ] || { echo && cat "$WORK/scale-section"; } >>"$here/RESULTS.md"
	[ ! -s "$WORK/tests-section" ] || { echo && cat "$WORK/tests-section"; } >>"$here/RESULTS.md"
fi
say "wrote $CSV and $OUT/RESULTS.md in $(($(date +%s) - started)) s"
[ -z "${FAILED:-}" ] || die "some measurements failed: see the table's last section"
