package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runCRIClean stops and removes every pod sandbox of a CRI runtime, so that
// the runtime tears down each pod's network (CNI DEL) and mounts before the
// node goes away. Used by down.sh after the kubelet has stopped.
func runCRIClean() int {
	fs := flag.NewFlagSet("cri-clean", flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "the runtime's socket, e.g. unix:///run/containerd/containerd.sock (required)")
	fs.Parse(os.Args[1:])
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "cri-clean: -endpoint is required")
		return 2
	}
	if err := criClean(*endpoint); err != nil {
		fmt.Fprintf(os.Stderr, "cri-clean: %v\n", err)
		return 1
	}
	return 0
}

func criClean(endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtime.NewRuntimeServiceClient(conn)
	pods, err := rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	var failed error
	for _, p := range pods.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: p.Id}); gone(err) != nil {
			failed = fmt.Errorf("stopping pod %s: %w", p.Metadata.GetName(), err)
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: p.Id}); gone(err) != nil {
			failed = fmt.Errorf("removing pod %s: %w", p.Metadata.GetName(), err)
		}
	}
	return failed
}

// gone drops the error of a pod that was removed in the meantime.
func gone(err error) error {
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}
