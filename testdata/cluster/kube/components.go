package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
)

func runAPIServer() int         { return cli.Run(apiserver.NewAPIServerCommand()) }
func runControllerManager() int { return cli.Run(controllermanager.NewControllerManagerCommand()) }
func runScheduler() int         { return cli.Run(scheduler.NewSchedulerCommand()) }
func runKubelet() int           { return cli.Run(kubelet.NewKubeletCommand(context.Background())) }
func runProxy() int             { return cli.Run(proxy.NewProxyCommand()) }

// runKubectl is upstream kubectl's main.
func runKubectl() int {
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck // as upstream
	if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}
