package tunnel_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// With AuditDials (PLUG_AUDIT_DIALS=on) each connection a run asks for is
// a run.dial event naming what it reached, the refused ones with why; past
// AuditDialBurst a key's events are left out, and the next one written
// says how many were. Without it, no dial is written.
func TestDialsInTheAuditTrail(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			platform := tunneltest.NewPlatform()
			platform.AddWorkload("db:5432", echoServer(t, ""))
			platform.SetNames(tunnel.ClusterName{Name: "db", Ports: []int{5432}})
			audit := tunneltest.NewAudit()
			addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Audit, a.AuditDials = audit.Sink, on })
			signer, _ := newKey(t)
			s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-d"})
			ctx := ctxFor(t, 60*time.Second)
			dial := func(address string) error {
				c, err := s.Dial(ctx, address)
				if err == nil {
					c.Close()
				}
				return err
			}
			if err := dial("db:5432"); err != nil {
				t.Fatal(err)
			}
			if err := dial("nowhere:80"); err == nil {
				t.Fatal("a name the cluster lacks was dialled")
			}
			s.Close()
			audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded })
			var dials []tunnel.AuditEvent
			for _, e := range audit.Events() {
				if e.Event == tunnel.AuditRunDial {
					dials = append(dials, e)
				}
			}
			if !on {
				if len(dials) != 0 {
					t.Errorf("dials written without AuditDials: %+v", dials)
				}
				return
			}
			fp := keys.Fingerprint(signer.PublicKey())
			if len(dials) != 2 || dials[0].Name != "db" || dials[0].Port != 5432 || dials[0].Reason != "" || dials[0].Run != "run-d" || dials[0].Key != fp || !dials[0].UserAsserted ||
				dials[1].Name != "nowhere" || dials[1].Port != 80 || !strings.Contains(dials[1].Reason, "nowhere") {
				t.Errorf("the dials written: %+v", dials)
			}

			// Past the bound: dial until an event says how many were left out.
			s, _ = connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-e"})
			for range tunnel.AuditDialBurst {
				if err := dial("db:5432"); err != nil {
					t.Fatal(err)
				}
			}
			clustertest.Eventually(t, clustertest.Settle, "a run.dial saying how many were left out", func() error {
				if err := dial("db:5432"); err != nil {
					return err
				}
				for _, e := range audit.Events() {
					if e.Event == tunnel.AuditRunDial && e.Dropped > 0 {
						return nil
					}
				}
				return fmt.Errorf("none yet")
			})
			n := 0
			for _, e := range audit.Events() {
				if e.Event == tunnel.AuditRunDial && e.Run == "run-e" {
					n++
				}
			}
			if n > tunnel.AuditDialBurst+int(clustertest.Settle/time.Second)+1 {
				t.Errorf("%d dial events of one key, past the bound", n)
			}
		})
	}
}
