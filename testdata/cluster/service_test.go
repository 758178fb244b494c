package cluster

import (
	"fmt"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// TestServiceFollowsAHandWrittenEndpointSlice proves the path plug takes to
// serve a name: a pod reaches a Service by its short name, its full name and
// its ClusterIP; once the Service loses its selector, the controllers' slice
// and the stale v1 Endpoints are deleted, and a hand-written EndpointSlice
// points at another pod, every new connection reaches that pod.
func TestServiceFollowsAHandWrittenEndpointSlice(t *testing.T) {
	k := clustertest.NeedKube(t)
	k.Apply(t, workloadPod(k, "web-a", "web", "serve", ":8080")+
		workloadPod(k, "web-b", "other", "serve", ":8080")+
		workloadPod(k, "client", "client", "pause")+`
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`)
	waitReady(t, k, "web-a", "web-b", "client")
	clusterIP := k.Kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	ipA := k.Kubectl(t, "get", "pod", "web-a", "-o", "jsonpath={.status.podIP}")
	ipB := k.Kubectl(t, "get", "pod", "web-b", "-o", "jsonpath={.status.podIP}")

	for _, url := range []string{
		"http://web/",
		"http://web." + k.Namespace + ".svc.cluster.local/",
		"http://" + clusterIP + "/",
	} {
		clustertest.Eventually(t, 30*time.Second, "GET "+url+" from a pod", func() error {
			got, err := get(k, "client", 3, url)
			if err != nil {
				return err
			}
			if count(got, "web-a") != 3 {
				return fmt.Errorf("answers %q, want web-a thrice", got)
			}
			return nil
		})
	}

	k.Kubectl(t, "patch", "service", "web", "--type=json", "-p", `[{"op":"remove","path":"/spec/selector"}]`)
	k.Kubectl(t, "delete", "endpoints", "web", "--ignore-not-found")
	k.Kubectl(t, "delete", "endpointslices", "-l", "kubernetes.io/service-name=web")
	k.Apply(t, fmt.Sprintf(`
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-by-hand
  labels:
    kubernetes.io/service-name: web
    endpointslice.kubernetes.io/managed-by: plug-test
addressType: IPv4
endpoints:
- addresses: [%q]
  conditions: {ready: true}
ports:
- {name: "", port: 8080, protocol: TCP}
`, ipB))
	clustertest.Eventually(t, clustertest.Settle, "only the hand-written slice is left", func() error {
		names := k.Kubectl(t, "get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "jsonpath={.items[*].metadata.name}")
		if names != "web-by-hand" {
			return fmt.Errorf("the Service's slices are %q", names)
		}
		return nil
	})
	clustertest.Eventually(t, 30*time.Second, "kube-proxy follows the hand-written slice", func() error {
		got, err := get(k, "client", 1, "http://web/")
		if err != nil {
			return err
		}
		if got[0] != "web-b" {
			return fmt.Errorf("answered by %q, want web-b", got[0])
		}
		return nil
	})

	logA := func() int {
		got, err := get(k, "client", 1, "http://"+ipA+":8080/log")
		if err != nil {
			t.Fatal(err)
		}
		return len(got) - count(got, "")
	}
	seenByA := logA()
	got, err := get(k, "client", 20, "http://web/")
	if err != nil {
		t.Fatal(err)
	}
	if n := count(got, "web-b"); n != 20 {
		t.Errorf("%d of 20 new connections reached web-b; answers: %q", n, got)
	}
	if n := logA(); n != seenByA {
		t.Errorf("web-a saw %d requests while the Service pointed at web-b", n-seenByA)
	}
}
