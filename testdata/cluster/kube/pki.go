package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// runPKI writes, into -dir, everything the cluster authenticates with: a CA,
// the serving and client certificates of each component, their kubeconfigs,
// the ServiceAccount signing key and an admin bearer token. Files that exist
// already are kept, so the cluster's credentials stay stable across runs.
func runPKI() int {
	fs := flag.NewFlagSet("pki", flag.ExitOnError)
	var p pki
	fs.StringVar(&p.dir, "dir", "", "where to write the files (required)")
	fs.StringVar(&p.nodeName, "node-name", "", "the Node's name (required)")
	nodeIP := fs.String("node-ip", "", "the node's address, where the apiserver and the kubelet serve (required)")
	apiIP := fs.String("service-ip", "", "the ClusterIP of the kubernetes Service (required)")
	fs.Parse(os.Args[1:])
	p.nodeIP, p.serviceIP = net.ParseIP(*nodeIP), net.ParseIP(*apiIP)
	if p.dir == "" || p.nodeName == "" || p.nodeIP == nil || p.serviceIP == nil {
		fmt.Fprintln(os.Stderr, "pki: -dir, -node-name, -node-ip and -service-ip are required (addresses as IPs)")
		return 2
	}
	if err := p.write(); err != nil {
		fmt.Fprintf(os.Stderr, "pki: %v\n", err)
		return 1
	}
	return 0
}

type pki struct {
	dir               string
	nodeName          string
	nodeIP, serviceIP net.IP
	caCert            *x509.Certificate
	caKey             *ecdsa.PrivateKey
}

// client is a component that authenticates to the apiserver with a
// certificate and gets a kubeconfig.
type client struct{ file, user, group string }

func (p *pki) clients() []client {
	return []client{
		{"admin", "plug-test-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kubelet", "system:node:" + p.nodeName, "system:nodes"},
		{"kube-proxy", "system:kube-proxy", ""},
	}
}

const validity = 10 * 365 * 24 * time.Hour

func (p *pki) write() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	if err := p.loadOrMakeCA(); err != nil {
		return err
	}
	server := fmt.Sprintf("https://%s:6443", p.nodeIP)
	apiNames := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	apiIPs := []net.IP{p.nodeIP, p.serviceIP, net.IPv4(127, 0, 0, 1)}
	if err := p.leaf("apiserver", pkix.Name{CommonName: "kube-apiserver"}, apiNames, apiIPs, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	if err := p.leaf("kubelet-serving", pkix.Name{CommonName: p.nodeName}, []string{p.nodeName}, []net.IP{p.nodeIP}, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	kubeletClient := pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}
	if err := p.leaf("apiserver-kubelet-client", kubeletClient, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return err
	}
	for _, c := range p.clients() {
		name := pkix.Name{CommonName: c.user}
		if c.group != "" {
			name.Organization = []string{c.group}
		}
		if err := p.leaf(c.file, name, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
			return err
		}
		if err := p.kubeconfig(c, server); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	return p.adminToken()
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (p *pki) loadOrMakeCA() error {
	crtPath, keyPath := p.path("ca.crt"), p.path("ca.key")
	if exists(crtPath) && exists(keyPath) {
		cert, key, err := loadPair(crtPath, keyPath)
		p.caCert, p.caKey = cert, key
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "plug-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	p.caCert, _ = x509.ParseCertificate(der)
	p.caKey = key
	return writePair(crtPath, keyPath, der, key)
}

// leaf writes NAME.crt and NAME.key, signed by the CA, unless both exist.
func (p *pki) leaf(name string, subject pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) error {
	crtPath, keyPath := p.path(name+".crt"), p.path(name+".key")
	if exists(crtPath) && exists(keyPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	return writePair(crtPath, keyPath, der, key)
}

// kubeconfig writes NAME.kubeconfig for a client, with its credentials
// embedded so the file can be copied anywhere on the machine.
func (p *pki) kubeconfig(c client, server string) error {
	path := p.path(c.file + ".kubeconfig")
	if exists(path) {
		return nil
	}
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(p.path(c.file + ".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.path(c.file + ".key"))
	if err != nil {
		return err
	}
	b64 := base64.StdEncoding.EncodeToString
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: plug-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: plug-test
  context:
    cluster: plug-test
    user: %s
current-context: plug-test
`, server, b64(ca), c.user, b64(crt), b64(key), c.user)
	return os.WriteFile(path, []byte(text), 0o600)
}

// serviceAccountKey writes sa.key (signing) and sa.pub (verifying).
func (p *pki) serviceAccountKey() error {
	keyPath, pubPath := p.path("sa.key"), p.path("sa.pub")
	if exists(keyPath) && exists(pubPath) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	priv, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// adminToken writes admin.token (the bare token) and tokens.csv, the
// apiserver's static token file granting it system:masters.
func (p *pki) adminToken() error {
	tokenPath, csvPath := p.path("admin.token"), p.path("tokens.csv")
	if exists(tokenPath) && exists(csvPath) {
		return nil
	}
	b := make([]byte, 24)
	rand.Read(b)
	token := hex.EncodeToString(b)
	if err := os.WriteFile(tokenPath, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	line := fmt.Sprintf("%s,plug-test-admin-token,plug-test-admin-token,\"system:masters\"\n", token)
	return os.WriteFile(csvPath, []byte(line), 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writePair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	priv, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func loadPair(crtPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPEM, err := os.ReadFile(crtPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New(crtPath + " or " + keyPath + " is not PEM; delete both to make a new CA")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	return cert, key, err
}
