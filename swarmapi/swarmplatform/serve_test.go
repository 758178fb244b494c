package swarmplatform

import (
	"context"
	"errors"
	"strings"
	"testing"

	"plug/tunnel"
)

func TestServeRefusesBadInputBeforeTouchingTheEngine(t *testing.T) {
	f := newFakeSwarm(t)
	p := newPlatform(t, Options{Client: f.c, Address: "10.0.0.2", Networks: []NetworkRef{{ID: "n1", Name: "app"}}, Image: "plug:dev"})
	for _, b := range []tunnel.Binding{
		{Name: "Web", Port: 80, Target: 1},
		{Name: "web_api", Port: 80, Target: 1},
		{Name: "-web", Port: 80, Target: 1},
		{Name: "web-", Port: 80, Target: 1},
		{Name: strings.Repeat("a", 64), Port: 80, Target: 1},
		{Name: "web", Port: 0, Target: 1},
		{Name: "web", Port: 70000, Target: 1},
		{Name: "web", Port: 80, Target: 0},
	} {
		b.Holder = holder("run-bad")
		var refusal *tunnel.RefusedError
		if _, err := p.Serve(context.Background(), b); !errors.As(err, &refusal) {
			t.Errorf("%s:%d->%d: got %v, want a refusal", b.Name, b.Port, b.Target, err)
		}
		if err := p.Release(context.Background(), b); err != nil {
			t.Errorf("releasing %q: %v", b.Name, err)
		}
	}
	var refusal *tunnel.RefusedError
	if _, err := p.Serve(context.Background(), tunnel.Binding{Name: "web", Port: 80, Target: 1}); !errors.As(err, &refusal) {
		t.Errorf("a binding without a run: got %v, want a refusal", err)
	}
	if asked := f.Requests(); len(asked) != 0 {
		t.Errorf("the engine was asked %v", asked)
	}
}
