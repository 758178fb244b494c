package clustertest

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestNamespaceForIsAUniqueDNSLabel(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	long := "TestSomething/With_Sub Tests/and a very long name that goes on and on and on"
	a, b := namespaceFor(long), namespaceFor(long)
	for _, ns := range []string{a, b, namespaceFor("Test"), namespaceFor("--")} {
		if len(ns) > 63 || !label.MatchString(ns) {
			t.Errorf("namespaceFor gave %q, not a DNS label", ns)
		}
	}
	if a == b {
		t.Errorf("namespaceFor gave %q twice", a)
	}
	if !strings.HasPrefix(a, "t-testsomething-with-sub-tests-and-a-ver") {
		t.Errorf("namespaceFor(%q) = %q, want it to start with the test name", long, a)
	}
}

// stopRecorder is a testing.TB that records how NeedKube stopped the test.
type stopRecorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *stopRecorder) Helper() {}
func (r *stopRecorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, format
	runtime.Goexit()
}
func (r *stopRecorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, format
	runtime.Goexit()
}

func needKubeWithout(t *testing.T, ci string) *stopRecorder {
	return stopped(t, ci, func(tb testing.TB) { NeedKube(tb) })
}

func TestNeedKubeWithoutClusterSkipsOrFailsInCI(t *testing.T) {
	if r := needKubeWithout(t, ""); !r.skipped {
		t.Errorf("without CI, NeedKube did not skip (failed=%v)", r.failed)
	}
	if r := needKubeWithout(t, "true"); !r.failed {
		t.Errorf("with CI=true, NeedKube did not fail (skipped=%v)", r.skipped)
	}
}

func TestNeedKubeGivesANamespaceAndAWorkingToken(t *testing.T) {
	var ns string
	t.Run("restricted", func(t *testing.T) {
		k := NeedKube(t, Restricted())
		ns = k.Namespace
		label := k.Kubectl(t, "get", "namespace", ns, "-o", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`)
		if label != "restricted" {
			t.Errorf("namespace %s has enforce label %q, want restricted", ns, label)
		}

		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(k.CA) {
			t.Fatalf("%s holds no PEM certificate", k.CAFile)
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		req, _ := http.NewRequest("GET", k.Server+"/api/v1/namespaces/"+ns, nil)
		req.Header.Set("Authorization", "Bearer "+k.Token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET namespace %s with the admin token: %s, want 200", ns, resp.Status)
		}
	})
	if ns == "" {
		return // skipped: no cluster
	}
	k := NeedKube(t)
	phase, err := k.TryKubectl("get", "namespace", ns, "-o", "jsonpath={.status.phase}")
	if err == nil && phase != "Terminating" {
		t.Errorf("after its test, namespace %s is %q, want it Terminating or gone", ns, phase)
	}
}
