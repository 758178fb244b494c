package swarmplatform

import (
	"context"
	"strings"
	"testing"

	"plug/swarmapi"
)

func TestRightsOnTheLocalSwarm(t *testing.T) {
	s := needSwarm(t)
	rights, err := s.platform(t, "").Rights(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rights {
		if !r.Required || !r.Granted {
			t.Errorf("%+v", r)
		}
	}
	if len(rights) != 4 || !strings.Contains(rights[1].Rule, "speaks 1.41") || !strings.Contains(rights[3].Rule, s.network.Name) {
		t.Errorf("rights %+v", rights)
	}

	noNetwork := newPlatform(t, Options{Client: s.c})
	rights, err = noNetwork.Rights(context.Background())
	if err != nil || rights[3].Granted || !strings.Contains(rights[3].Fix, s.network.Name) {
		t.Errorf("without a network: %+v, %v", rights, err)
	}
	noSocket := newPlatform(t, Options{Client: swarmapi.NewClient(t.TempDir() + "/docker.sock")})
	rights, err = noSocket.Rights(context.Background())
	if err != nil || rights[0].Granted || !strings.Contains(rights[0].Fix, "no Docker socket") {
		t.Fatalf("without a socket: %+v, %v", rights, err)
	}
}
