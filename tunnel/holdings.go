package tunnel

import (
	"fmt"
	"sync"
)

// holdings counts the bytes that peers sent and that wait in the agent to
// be carried — the datagrams queued for served UDP flows, the windows of
// connections whose far end does not take what they bring (stall.go) —
// per key against Limits.MemoryPerKey and for all keys against
// Limits.Memory. What the agent holds otherwise for a key is bounded per
// item: a channel it reads by what its reader has not yet taken, a name or
// a run by its state.
type holdings struct {
	perKey, all int64
	// The errors of the two caps, made once: a flood of datagrams past
	// a cap is refused one datagram at a time, and each refusal
	// allocates nothing.
	overKey, overAll *capError

	mu    sync.Mutex
	keys  map[string]int64
	total int64
}

func newHoldings(l Limits) *holdings {
	return &holdings{
		perKey:  int64(l.MemoryPerKey) << 20,
		all:     int64(l.Memory) << 20,
		overKey: &capError{text: fmt.Sprintf("the agent's cap of %d MiB waiting to be carried for one key is reached; read faster, or ask the cluster admin to raise PLUG_MAX_MEMORY_PER_KEY", l.MemoryPerKey)},
		overAll: &capError{text: fmt.Sprintf("the agent's cap of %d MiB waiting to be carried for all keys together is reached; ask the cluster admin to raise PLUG_MAX_MEMORY", l.Memory)},
		keys:    map[string]int64{},
	}
}

// hold counts n bytes more for key, or returns a *capError naming the cap
// they would exceed.
func (h *holdings) hold(key string, n int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.keys[key]
	switch {
	case k+int64(n) > h.perKey:
		countCap("PLUG_MAX_MEMORY_PER_KEY")
		return h.overKey
	case h.total+int64(n) > h.all:
		countCap("PLUG_MAX_MEMORY")
		return h.overAll
	}
	h.keys[key] = k + int64(n)
	h.total += int64(n)
	return nil
}

// release counts n bytes less for key.
func (h *holdings) release(key string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys[key] -= int64(n)
	h.total -= int64(n)
	if h.keys[key] <= 0 {
		delete(h.keys, key)
	}
}
