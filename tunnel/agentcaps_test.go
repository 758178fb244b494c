package tunnel_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// openFiles counts this process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// Many keys, each within its own cap of 32 names, together ask for more
// names than the agent's cap for all keys (here 96 of 10 × 32; by default
// the cap is sized to the agent's file descriptors and memory, see
// TestTheAgentWideCapsFitTheFileDescriptors): the names past it are
// refused with the cap named, the agent's open files grow by the names it
// serves only, and another key's run dials through the agent all along.
// Each served name costs the process at most the nameCost the caps are
// sized with, of heap
// (the client's side is in the same process: an upper bound).
func TestNamesOfAllKeysAreCappedBeforeFilesRunOut(t *testing.T) {
	const keys, perKey, capNames = 10, 32, 96
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "web says "))
	platform.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Limits = tunnel.Limits{Names: capNames, Runs: keys + 1}
		a.Logf = func(string, ...any) {}
	})
	bystanderKey, _ := newKey(t)
	bystander, _ := connect(t, addr, hostKey, bystanderKey, tunnel.RunInfo{})
	dial := func() error {
		return echoOnce(func() (net.Conn, error) { return bystander.Dial(context.Background(), "web:80") }, "web says ")
	}
	if err := dial(); err != nil {
		t.Fatal(err)
	}
	local := echoServer(t, "")
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	files := openFiles(t)

	ctx := ctxFor(t, 60*time.Second)
	var mu sync.Mutex
	served, refused := 0, 0
	var others []error
	var wg sync.WaitGroup
	for k := range keys {
		signer, _ := newKey(t)
		s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
		wg.Go(func() {
			for n := range perKey {
				_, err := s.Serve(ctx, fmt.Sprintf("k%d-n%d", k, n), 80, local)
				mu.Lock()
				switch {
				case err == nil:
					served++
				case strings.Contains(err.Error(), fmt.Sprintf("cap of %d names served for all keys together", capNames)) && strings.Contains(err.Error(), "PLUG_MAX_NAMES"):
					refused++
				default:
					others = append(others, err)
				}
				mu.Unlock()
			}
		})
		if err := dial(); err != nil {
			t.Errorf("another key's run, after %d keys asked for names: %v", k, err)
		}
	}
	wg.Wait()
	for _, err := range others {
		t.Errorf("a name refused for another reason than the cap: %v", err)
	}
	if served != capNames || refused != keys*perKey-capNames {
		t.Errorf("%d names served and %d refused at the cap, want %d and %d", served, refused, capNames, keys*perKey-capNames)
	}
	// Each served name is one listener; each key's run one connection,
	// two file descriptors in this process (both its ends).
	grown := openFiles(t) - files
	if want := capNames + 2*keys + 8; grown > want {
		t.Errorf("the process's open files grew by %d for %d names served and %d runs, want at most %d", grown, served, keys, want)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perName := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(max(1, served))
	t.Logf("%d keys × %d names asked for: %d served, %d refused at the cap of %d; open files +%d; heap %d KiB a name served (with the runs and the client's side)",
		keys, perKey, served, refused, capNames, grown, perName>>10)
	if perName > tunnel.NameCost {
		t.Errorf("a served name costs %d KiB of heap, more than the %d KiB the caps are sized with", perName>>10, tunnel.NameCost>>10)
	}
	if err := dial(); err != nil {
		t.Errorf("another key's run, once the names were refused: %v", err)
	}
	signer, _ := newKey(t)
	if _, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("cap of %d runs open for all keys together", keys+1)) || !strings.Contains(err.Error(), "PLUG_MAX_RUNS") {
		t.Errorf("a run past the cap of runs for all keys: %v", err)
	}
}
