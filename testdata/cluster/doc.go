// Package cluster holds the checks of the test Kubernetes cluster that
// up.sh starts: each proves, on the real cluster, a behaviour plug relies on.
// Run them with `go test ./...` in this directory once up.sh has run; with
// CI=true they fail when the cluster is not up.
//
// The cluster's own programs are built from the modules in kube/ (Kubernetes
// and etcd) and coredns/, kept apart so that these checks build in seconds.
package cluster
