package k8sapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseYAMLReadsKubectlLayout(t *testing.T) {
	src := `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: QUJD
    server: https://198.18.32.1:6443   # the node
  name: local
contexts:
- context:
    cluster: local
    namespace: "team a"
    user: admin
  name: local
current-context: 'local'
kind: Config
preferences: {}
users:
  - name: admin
    user:
      token: abc:def
`
	got, err := parseYAML([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "v1",
		"clusters": []any{map[string]any{
			"cluster": map[string]any{"certificate-authority-data": "QUJD", "server": "https://198.18.32.1:6443"},
			"name":    "local",
		}},
		"contexts": []any{map[string]any{
			"context": map[string]any{"cluster": "local", "namespace": "team a", "user": "admin"},
			"name":    "local",
		}},
		"current-context": "local",
		"kind":            "Config",
		"preferences":     map[string]any{},
		"users":           []any{map[string]any{"name": "admin", "user": map[string]any{"token": "abc:def"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed\n%#v\nwant\n%#v", got, want)
	}
}

func TestParseYAMLRefusesWhatItDoesNotRead(t *testing.T) {
	for _, src := range []string{"a: |\n  text\n", "a: [1, 2]\n", "a: b\n    c: d\n", "just text\n"} {
		if _, err := parseYAML([]byte(src)); err == nil {
			t.Errorf("parseYAML(%q) succeeded, want an error naming the line", src)
		} else if !strings.Contains(err.Error(), "line") {
			t.Errorf("parseYAML(%q) = %v, want an error naming the line", src, err)
		}
	}
}

// testCert returns a self-signed certificate and its key, PEM-encoded.
func testCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "admin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func TestLoadKubeconfigWithFilesAndInlineData(t *testing.T) {
	dir := t.TempDir()
	cert, key := testCert(t)
	os.WriteFile(filepath.Join(dir, "ca.crt"), cert, 0o600)
	os.WriteFile(filepath.Join(dir, "admin.key"), key, 0o600)
	os.WriteFile(filepath.Join(dir, "token"), []byte("tok-1\n"), 0o600)
	kc := `apiVersion: v1
kind: Config
current-context: cert
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
users:
- name: by-cert
  user:
    client-certificate-data: ` + base64.StdEncoding.EncodeToString(cert) + `
    client-key: admin.key
- name: by-token
  user:
    tokenFile: token
contexts:
- name: cert
  context: {cluster: c, user: by-cert}
`
	path := filepath.Join(dir, "config")
	os.WriteFile(path, []byte(kc), 0o600)
	if _, err := LoadKubeconfig(path, ""); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("a flow mapping must be refused with advice, got %v", err)
	}
	kc = strings.Replace(kc, "  context: {cluster: c, user: by-cert}\n",
		"  context:\n    cluster: c\n    user: by-cert\n- name: token\n  context:\n    cluster: c\n    user: by-token\n    namespace: ns1\n", 1)
	os.WriteFile(path, []byte(kc), 0o600)

	cfg, err := LoadKubeconfig(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://127.0.0.1:6443" || len(cfg.TLS.Certificates) != 1 || cfg.TLS.RootCAs == nil || cfg.Token != nil {
		t.Fatalf("cert context: got %+v", cfg)
	}
	cfg, err = LoadKubeconfig(path, "token")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := cfg.Token(); err != nil || tok != "tok-1" || cfg.Namespace != "ns1" {
		t.Fatalf("token context: token %q (%v), namespace %q", tok, err, cfg.Namespace)
	}
	if _, err := LoadKubeconfig(path, "nope"); err == nil || !strings.Contains(err.Error(), `no context called "nope"`) {
		t.Fatalf("unknown context: got %v", err)
	}
}

func TestInClusterRereadsTheRotatedToken(t *testing.T) {
	dir := t.TempDir()
	cert, _ := testCert(t)
	os.WriteFile(filepath.Join(dir, "ca.crt"), cert, 0o600)
	os.WriteFile(filepath.Join(dir, "token"), []byte("first"), 0o600)
	os.WriteFile(filepath.Join(dir, "namespace"), []byte("plug\n"), 0o600)
	if _, err := inClusterFrom(dir, "", ""); err != ErrNotInCluster {
		t.Fatalf("without the env: %v, want ErrNotInCluster", err)
	}
	cfg, err := inClusterFrom(dir, "198.18.16.1", "443")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://198.18.16.1:443" || cfg.Namespace != "plug" {
		t.Fatalf("got server %q namespace %q", cfg.Server, cfg.Namespace)
	}
	// A token older than maxAge is read again.
	tok := &fileToken{path: filepath.Join(dir, "token"), maxAge: 0}
	first, _ := tok.get()
	os.WriteFile(filepath.Join(dir, "token"), []byte("second"), 0o600)
	second, _ := tok.get()
	if first != "first" || second != "second" {
		t.Fatalf("tokens read: %q then %q", first, second)
	}
}
