#!/bin/sh
# run.sh — plug doing its job on the local Kubernetes, narrated.
#
# Needs the local cluster (testdata/cluster/up.sh) and the plug image in its
# registry (PLUG_REGISTRY_IMAGE; else plug:dev, imported into the node);
# `./build.sh demo` does both first. Run as root. It deploys the agent and a
# two-service sample app in the namespace plug-demo, installs the plug CLI
# the way a developer does (over SSH, from the agent), replaces the app's
# backend with a process on this machine, and puts it back.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
env=${PLUG_TEST_ENV_DIR:-/run/plug-test}/kube.env
[ -r "$env" ] || { echo "run.sh: the local cluster is not up; start it with testdata/cluster/up.sh" >&2; exit 1; }
. "$env"
export KUBECONFIG
ns=${PLUG_DEMO_NAMESPACE:-plug-demo}
host=$NODE_IP port=32222
workload=${PLUG_TEST_CACHE:-/var/cache/plug-test}/workload/workload
k() { "$KUBECTL" -n "$ns" "$@"; }

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
show() { printf '  $ %s\n' "$*"; }
indent() { sed 's/^/    /'; }

# run CMD...: runs CMD and shows its output indented; stops the demo, saying
# what failed, when CMD fails.
run() {
	out=$("$@" 2>&1) || {
		printf '%s\n' "$out" | indent >&2
		echo "run.sh: this step failed: $*" >&2
		exit 1
	}
	[ -z "$out" ] || printf '%s\n' "$out" | indent
}

# ask_web prints what web answers a workload in the cluster, three times.
ask_web() { run k exec visitor -- /workload get -n 3 http://web:8080/; }

# show_api prints api's Service as the demo compares it.
show_api() {
	run k get service api -o custom-columns='NAME:.metadata.name,CLUSTER-IP:.spec.clusterIP,SELECTOR:.spec.selector'
}

# wait_for TEXT: until web's answer contains TEXT, or 30 s.
wait_for() {
	deadline=$(($(date +%s) + 30))
	until k exec visitor -- /workload get http://web:8080/ 2>/dev/null | grep -q "$1"; do
		[ "$(date +%s)" -lt "$deadline" ] || { echo "run.sh: web never answered '$1'" >&2; exit 1; }
		sleep 0.5
	done
}

say "1. A cluster administrator deploys the plug agent into the app's namespace:"
"$KUBECTL" get namespace "$ns" >/dev/null 2>&1 || run "$KUBECTL" create namespace "$ns"
if [ -n "${PLUG_REGISTRY_IMAGE:-}" ]; then
	# Always: the tag dev is pushed again by every up.sh after a new build.
	edit="s|image: plug:dev|image: $PLUG_REGISTRY_IMAGE|; s|imagePullPolicy: IfNotPresent|imagePullPolicy: Always|"
	show "sed '$edit' deploy/plug-k8s.yaml | kubectl -n $ns apply -f -"
	sed "$edit" "$repo/deploy/plug-k8s.yaml" | run k apply -f -
else
	show "kubectl -n $ns apply -f deploy/plug-k8s.yaml   # no registry image: plug:dev, imported into the node"
	run k apply -f "$repo/deploy/plug-k8s.yaml"
fi
run k rollout status deployment/plug --timeout=120s

say "2. The app: web answers with its name and what its backend, api, answers."
run k apply -f "$here/app.yaml" >/dev/null
run k rollout status deployment/api --timeout=120s >/dev/null
run k rollout status deployment/web --timeout=120s >/dev/null
run k wait --for=condition=Ready pod/visitor --timeout=120s >/dev/null
show "kubectl exec visitor -- workload get http://web:8080/"
wait_for "deployed in the cluster"
ask_web
show "kubectl get service api"
show_api

say "3. A developer installs plug from the agent, over SSH (no package manager, no root):"
dev=$(mktemp -d)
trap '[ -f "$dev/plug.pid" ] && kill "$(cat "$dev/plug.pid")" 2>/dev/null; rm -rf "$dev"' EXIT
export HOME="$dev" PATH="$dev/.local/bin:$PATH"
show "ssh -p $port -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null get@$host install | sh"
run ssh -p "$port" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
	"get@$host" install >"$dev/install.sh"
run sh "$dev/install.sh"
show "plug rn $host demo && plug keygen -p demo"
run plug rn "$host" demo
run plug keygen -p demo

say "4. The developer runs api on this machine, plugged into the cluster under api's name:"
show "plug -p demo -s api:8080:3000 -- workload serve -name 'api (on the laptop)' 127.0.0.1:3000"
{
	plug -p demo -s api:8080:3000 -- "$workload" serve -name "api (on the laptop)" 127.0.0.1:3000 2>&1 &
	echo $! >"$dev/plug.pid"
	wait
} | sed -u 's/^/    [plug] /' &
narrated=$!
wait_for "on the laptop"
say "   web, untouched and still in the cluster, now reaches the laptop's api:"
ask_web
show "kubectl get service api   (the same ClusterIP; its selector is saved in a receipt on it)"
show_api

say "5. Ctrl-C ends the run; plug gives api back at once:"
show "^C"
kill -INT "$(cat "$dev/plug.pid")"
wait "$narrated" || true
rm "$dev/plug.pid"
wait_for "deployed in the cluster"
ask_web
show_api

say "Done. The agent and the app stay in namespace $ns; remove them with: kubectl delete namespace $ns"
