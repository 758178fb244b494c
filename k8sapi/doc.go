// Package k8sapi is plug's own small client for the Kubernetes REST API,
// written on net/http and encoding/json so that a security review reads all
// of it. It speaks only what plug uses: Services, EndpointSlices, Endpoints,
// Pods, Secrets, ConfigMaps, the workloads (Deployments, StatefulSets,
// DaemonSets, Jobs) and SelfSubjectAccessReviews, with the fields plug reads
// or writes, and pods/exec over a WebSocket (exec.go).
//
// A Client is made from a Config, which comes from the pod's service account
// (InCluster) or from a kubeconfig file (LoadKubeconfig). Every call goes
// through one request helper; a response that is not a success becomes an
// *APIError decoded from the server's Status, classified by IsNotFound,
// IsConflict, IsForbidden, IsAlreadyExists and IsGone. Writes are made safe
// against concurrent writers with resourceVersion preconditions and
// RetryOnConflict; Follow lists and watches a collection, resuming from the
// last resourceVersion seen and relisting when the server says it is gone.
package k8sapi
