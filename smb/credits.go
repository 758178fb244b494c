//go:build linux

package smb

import "sync"

// credits is a connection's sequence window (MS-SMB2 3.3.1.1): the
// message ids the client may use next. Each request uses CreditCharge ids
// and each response grants more; an id is used at most once. The window
// never exceeds maxCredits.
type credits struct {
	mu   sync.Mutex
	low  uint64 // the lowest id not yet used
	size uint64 // ids from low on the client may use (some already used)
	used [maxCredits]bool
}

func (cr *credits) init() { cr.size = 1 }

// take uses ids mid..mid+n-1 and reports whether they were all in the
// window and unused. A request that fails this closes the connection.
func (cr *credits) take(mid uint64, n uint16) bool {
	if n == 0 {
		n = 1
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if mid < cr.low || mid+uint64(n) > cr.low+cr.size || mid+uint64(n) < mid {
		return false
	}
	for i := uint64(0); i < uint64(n); i++ {
		if cr.used[(mid+i)%maxCredits] {
			return false
		}
	}
	for i := uint64(0); i < uint64(n); i++ {
		cr.used[(mid+i)%maxCredits] = true
	}
	for cr.size > 0 && cr.used[cr.low%maxCredits] {
		cr.used[cr.low%maxCredits] = false
		cr.low++
		cr.size--
	}
	return true
}

// grant opens the window by what the client asked for (at least one),
// within maxCredits, and returns how many it opened.
func (cr *credits) grant(asked uint16) uint16 {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	g := uint64(max(asked, 1))
	g = min(g, maxCredits-cr.size)
	cr.size += g
	return uint16(g)
}
