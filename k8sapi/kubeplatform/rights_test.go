package kubeplatform

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"plug/k8sapi"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Rights checks every rule, and names the one command that grants a
// missing one; an agent without an optional right works without it, and
// says so.
func TestRightsReportEachRuleWithTheCommandGrantingIt(t *testing.T) {
	f := newFakeKube(t)
	f.Allow(func(a k8sapi.ResourceAttributes) bool { return a.Verb != "watch" || a.Resource != "pods" })
	var mu sync.Mutex
	var logged []string
	p := f.platform(t, f.agentPod(t, "agent-a"), func(o *Options) {
		o.Logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, fmt.Sprintf(format, args...))
		}
	})
	rights, err := p.Rights(bg)
	if err != nil {
		t.Fatal(err)
	}
	want := 2 // and the admission of the two shapes of volume helper
	for _, rl := range append(rules, auditRules()...) {
		want += len(rl.verbs)
	}
	if len(rights) != want {
		t.Errorf("%d rights reported, want one per verb of each rule and two admissions (%d)", len(rights), want)
	}
	for _, r := range rights {
		missing := r.Rule == "watch pods"
		if r.Granted == missing {
			t.Errorf("%s: granted %v", r.Rule, r.Granted)
		}
		if missing && (r.Required || !strings.Contains(r.Fix, "kubectl -n shop patch role plug --type=json") || !strings.Contains(r.Fix, `"resources":["pods"],"verbs":["watch"]`)) {
			t.Errorf("the missing right: %+v", r)
		}
	}

	tunneltest.Maintain(t, p)
	clustertest.Eventually(t, clustertest.Settle, "the agent says it does not watch pods", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logged {
			if strings.HasPrefix(l, "not watching pods") && strings.Contains(l, "forbidden") {
				return nil
			}
		}
		return fmt.Errorf("logged %q", logged)
	})
}
