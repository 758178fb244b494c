package swarmplatform

import (
	"context"
	"strings"
	"testing"

	"plug/swarmapi"
)

func TestRightsOfAnEngineTooOld(t *testing.T) {
	f := newFakeSwarm(t)
	f.SetVersion(swarmapi.Version{Version: "19.03.15", APIVersion: "1.40", MinAPIVersion: "1.12"})
	rights, err := newPlatform(t, Options{Client: f.c}).Rights(context.Background())
	if err != nil || !rights[0].Granted || rights[1].Granted || !strings.Contains(rights[1].Fix, "Docker 20.10 or newer") {
		t.Fatalf("%+v, %v", rights, err)
	}
}

// Rights reports each requirement on the engine, with what to do about a
// missing one.
func TestRightsOfTheFakeSwarm(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	rights, err := p.Rights(bg)
	if err != nil || len(rights) != 4 {
		t.Fatalf("%+v, %v", rights, err)
	}
	for _, r := range rights {
		if !r.Required || !r.Granted {
			t.Errorf("on a manager, on the app network: %+v", r)
		}
	}
	if !strings.Contains(rights[1].Rule, "(Docker 20.10.24 speaks 1.41)") || !strings.Contains(rights[3].Rule, "(app)") {
		t.Errorf("rights %+v", rights)
	}

	lonely := f.agent(t, "plug_lonely", func(o *Options) { o.Networks = nil })
	if rights, err := lonely.Rights(bg); err != nil || rights[3].Granted || !strings.HasSuffix(rights[3].Fix, "this swarm's overlay networks: app") {
		t.Errorf("on no network: %+v, %v", rights, err)
	}
	f.SetSwarm(swarmapi.SwarmInfo{LocalNodeState: "inactive"})
	if rights, err := p.Rights(bg); err != nil || rights[2].Granted || !strings.Contains(rights[2].Fix, `in no swarm (state "inactive")`) {
		t.Errorf("in no swarm: %+v, %v", rights, err)
	}
}
