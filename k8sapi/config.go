package k8sapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Config says how to reach one API server and who to be there.
type Config struct {
	// Server is the API server's base URL, e.g. "https://198.18.16.1:443".
	Server string
	// TLS verifies the server and, for certificate authentication, carries
	// the client certificate.
	TLS *tls.Config
	// Token returns the bearer token for the next request; nil sends none.
	Token func() (string, error)
	// Namespace is the default namespace: the pod's own in a cluster, the
	// context's in a kubeconfig. Empty when neither says.
	Namespace string
}

// ServiceAccountDir is where the kubelet mounts a pod's service account
// token, CA certificate and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ErrNotInCluster is returned by InCluster outside a pod.
var ErrNotInCluster = errors.New("not running in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")

// InCluster is the Config of a pod: the API server from
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the CA certificate,
// token and namespace from the mounted service account. The token file is
// read again at least once a minute, so a rotated token is picked up.
func InCluster() (Config, error) {
	return inClusterFrom(ServiceAccountDir, os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
}

func inClusterFrom(dir, host, port string) (Config, error) {
	if host == "" || port == "" {
		return Config{}, ErrNotInCluster
	}
	pem, err := os.ReadFile(dir + "/ca.crt")
	if err != nil {
		return Config{}, fmt.Errorf("reading the service account's CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return Config{}, fmt.Errorf("%s/ca.crt holds no PEM certificate", dir)
	}
	tok := &fileToken{path: dir + "/token", maxAge: time.Minute}
	if _, err := tok.get(); err != nil {
		return Config{}, err
	}
	ns, err := os.ReadFile(dir + "/namespace")
	if err != nil {
		return Config{}, fmt.Errorf("reading the service account's namespace: %w", err)
	}
	return Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		TLS:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Token:     tok.get,
		Namespace: strings.TrimSpace(string(ns)),
	}, nil
}

// fileToken reads a bearer token from a file, again once it is older than
// maxAge (the kubelet rotates projected tokens in place).
type fileToken struct {
	path   string
	maxAge time.Duration

	mu    sync.Mutex
	token string
	read  time.Time
}

func (f *fileToken) get() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != "" && time.Since(f.read) < f.maxAge {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("reading the bearer token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("the bearer token file %s is empty", f.path)
	}
	f.token, f.read = t, time.Now()
	return t, nil
}
