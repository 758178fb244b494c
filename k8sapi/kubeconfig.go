package k8sapi

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LoadKubeconfig reads the kubeconfig file at path and returns the Config
// of its context called context, or of its current context when context
// is empty. It understands the server, the CA certificate (inline or as a
// file), bearer tokens (inline or as a file, read again once a minute),
// client certificates (inline or as files) and the context's namespace.
// Files named in it are relative to the kubeconfig's folder.
func LoadKubeconfig(path, context string) (Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	doc, err := parseYAML(src)
	if err != nil {
		return Config{}, fmt.Errorf("reading the kubeconfig %s: %w", path, err)
	}
	kc := kubeconfigDoc{dir: filepath.Dir(path), root: asMap(doc)}
	cfg, err := kc.config(context)
	if err != nil {
		return Config{}, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// DefaultKubeconfig is the kubeconfig a kubectl run would use: the first
// file of $KUBECONFIG, else ~/.kube/config.
func DefaultKubeconfig() string {
	if env := os.Getenv("KUBECONFIG"); env != "" {
		return filepath.SplitList(env)[0]
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".kube", "config")
}

type kubeconfigDoc struct {
	dir  string
	root map[string]any
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// named finds the entry called name in the list under key (clusters,
// users, contexts) and returns its body (the map under field).
func (k kubeconfigDoc) named(key, field, name string) (map[string]any, error) {
	list, _ := k.root[key].([]any)
	for _, item := range list {
		m := asMap(item)
		if str(m, "name") == name {
			return asMap(m[field]), nil
		}
	}
	return nil, fmt.Errorf("it has no %s called %q", strings.TrimSuffix(key, "s"), name)
}

func (k kubeconfigDoc) config(context string) (Config, error) {
	if context == "" {
		context = str(k.root, "current-context")
	}
	if context == "" {
		return Config{}, fmt.Errorf("it names no current-context; pick one with `kubectl config use-context`")
	}
	ctx, err := k.named("contexts", "context", context)
	if err != nil {
		return Config{}, err
	}
	cluster, err := k.named("clusters", "cluster", str(ctx, "cluster"))
	if err != nil {
		return Config{}, err
	}
	user := map[string]any{}
	if u := str(ctx, "user"); u != "" {
		if user, err = k.named("users", "user", u); err != nil {
			return Config{}, err
		}
	}
	cfg := Config{Server: str(cluster, "server"), Namespace: str(ctx, "namespace")}
	if cfg.Server == "" {
		return Config{}, fmt.Errorf("cluster %q has no server", str(ctx, "cluster"))
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if skip := cluster["insecure-skip-tls-verify"]; skip == true || skip == "true" {
		tlsCfg.InsecureSkipVerify = true
	}
	ca, err := k.bytes(cluster, "certificate-authority-data", "certificate-authority")
	if err != nil {
		return Config{}, err
	}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return Config{}, fmt.Errorf("the CA certificate of cluster %q is not PEM", str(ctx, "cluster"))
		}
		tlsCfg.RootCAs = pool
	}
	cert, err := k.bytes(user, "client-certificate-data", "client-certificate")
	if err != nil {
		return Config{}, err
	}
	key, err := k.bytes(user, "client-key-data", "client-key")
	if err != nil {
		return Config{}, err
	}
	if cert != nil || key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return Config{}, fmt.Errorf("the client certificate of user %q: %w", str(ctx, "user"), err)
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
	}
	cfg.TLS = tlsCfg
	if tok := str(user, "token"); tok != "" {
		cfg.Token = func() (string, error) { return tok, nil }
	} else if file := str(user, "tokenFile"); file != "" {
		ft := &fileToken{path: k.path(file), maxAge: time.Minute}
		cfg.Token = ft.get
	}
	return cfg, nil
}

// bytes reads a value given inline in base64 under dataKey or as a file
// named under fileKey; nil when neither is there.
func (k kubeconfigDoc) bytes(m map[string]any, dataKey, fileKey string) ([]byte, error) {
	if d := str(m, dataKey); d != "" {
		b, err := base64.StdEncoding.DecodeString(d)
		if err != nil {
			return nil, fmt.Errorf("%s is not base64: %w", dataKey, err)
		}
		return b, nil
	}
	if f := str(m, fileKey); f != "" {
		return os.ReadFile(k.path(f))
	}
	return nil, nil
}

func (k kubeconfigDoc) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(k.dir, p)
}
