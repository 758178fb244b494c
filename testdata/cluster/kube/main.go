// Command kube is the single-node Kubernetes of plug's tests, as one
// multi-call binary built from the upstream modules: every control-plane
// and node component, kubectl, and the small tools up.sh and down.sh need.
//
//	kube COMPONENT [FLAGS...]   run one component (see commands)
//	kubectl ...                 the same binary started through a link named kubectl
//
// Each component runs in its own process, exactly as its upstream main
// would run it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as the upstream mains do

	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
)

// commands maps a command name to the function that runs it and returns the
// process's exit code. The function sees os.Args as if it were its own main.
var commands = map[string]func() int{
	"etcd":                    runEtcd,
	"kube-apiserver":          runAPIServer,
	"kube-controller-manager": runControllerManager,
	"kube-scheduler":          runScheduler,
	"kubelet":                 runKubelet,
	"kube-proxy":              runProxy,
	"kubectl":                 runKubectl,
	"pki":                     runPKI,
	"cri-clean":               runCRIClean,
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok {
		if len(os.Args) < 2 {
			usage()
		}
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	run, ok := commands[name]
	if !ok {
		usage()
	}
	os.Exit(run())
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: kube COMMAND [ARGS...]\ncommands: %s\n", strings.Join(names, ", "))
	os.Exit(2)
}
