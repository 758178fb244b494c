package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"
)

// The audit trail in the cluster: besides its standard output, an agent
// whose platform keeps AuditSlots appends every audit line to a ring of
// AuditRingSlots slots (on Kubernetes the ConfigMaps plug-audit-0 to
// plug-audit-3), each holding at most AuditSlotMax bytes of JSON lines.
// The slot with the newest line is the current one; a batch that would
// overflow it, or a current slot whose first line is older than a
// share of AuditMaxAge, turns the ring: the next slot, the oldest, is
// replaced by the batch. Every replica appends, each write conditional on
// the version of the slot it read, so that replicas never lose each
// other's lines: a conflict rereads the ring and tries again. Lines older
// than AuditMaxAge are left out when the trail is read, and overwritten
// as the ring turns. A pod restart loses nothing already written.

const (
	// AuditRingSlots is the number of slots of the ring.
	AuditRingSlots = 4
	// AuditSlotMax bounds the bytes of one slot.
	AuditSlotMax = 512 << 10
	// AuditMaxAge is how long the cluster keeps an audit line.
	AuditMaxAge = 30 * 24 * time.Hour
	// auditQueueMax bounds the lines waiting to be written; more are
	// dropped, and the drop is logged.
	auditQueueMax = 4096
	// auditFlushEvery is how often the waiting lines are written.
	auditFlushEvery = time.Second
	// auditTries bounds the writes of one batch that meet a conflict.
	auditTries = 8
	// auditBackoffMax bounds the wait after a failed write before the
	// next try, doubling from auditFlushEvery.
	auditBackoffMax = 5 * time.Minute
)

// ErrAuditConflict is a slot written by another replica since it was read.
var ErrAuditConflict = errors.New("the audit slot was changed since it was read")

// AuditSlots is a platform that keeps the audit trail in the cluster.
type AuditSlots interface {
	// ReadAuditSlot returns slot i's JSON lines and its version; a slot
	// never written is empty, with version "".
	ReadAuditSlot(ctx context.Context, i int) (data []byte, version string, err error)
	// WriteAuditSlot replaces slot i's lines with data when its version is
	// still version ("" creates it), and returns its new version; else it
	// returns ErrAuditConflict.
	WriteAuditSlot(ctx context.Context, i int, data []byte, version string) (string, error)
}

// slot is one slot as the keeper last read or wrote it.
type slot struct {
	data    []byte
	version string
}

// AuditKeeper writes an agent's audit lines to the ring of its platform.
type AuditKeeper struct {
	slots AuditSlots
	logf  func(string, ...any)

	mu      sync.Mutex
	queue   [][]byte
	dropped int
	logged  string // the last failure logged: only changes are logged
	backoff time.Duration
	retryAt time.Time // no write before, after a failure

	cur  int // the current slot, once ring is read
	ring []slot
}

// NewAuditKeeper returns a keeper of slots; logf says what fails.
func NewAuditKeeper(slots AuditSlots, logf func(string, ...any)) *AuditKeeper {
	return &AuditKeeper{slots: slots, logf: logf}
}

// Add queues e to be written; it never blocks. It is an audit sink.
func (k *AuditKeeper) Add(e AuditEvent) {
	e.Schema = AuditSchema
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.queue) >= auditQueueMax {
		k.dropped++
		return
	}
	k.queue = append(k.queue, append(line, '\n'))
}

// Run writes the queued lines every second until ctx ends, and then once
// more, within 5 s.
func (k *AuditKeeper) Run(ctx context.Context) {
	t := time.NewTicker(auditFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			k.Flush(last)
			return
		case <-t.C:
			k.mu.Lock()
			wait := time.Now().Before(k.retryAt)
			k.mu.Unlock()
			if !wait {
				k.Flush(ctx)
			}
		}
	}
}

// Flush writes the queued lines now. Lines that cannot be written are
// kept for the next flush, within the queue's bound, and Run waits
// longer before each next try.
func (k *AuditKeeper) Flush(ctx context.Context) {
	k.mu.Lock()
	batch, dropped := k.queue, k.dropped
	k.queue, k.dropped = nil, 0
	k.mu.Unlock()
	if dropped > 0 {
		k.logf("the audit trail in the cluster lost %d lines: more than %d were waiting to be written", dropped, auditQueueMax)
	}
	if len(batch) == 0 {
		return
	}
	err := k.append(ctx, bytes.Join(batch, nil))
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.queue = append(batch, k.queue...)
		if n := len(k.queue) - auditQueueMax; n > 0 {
			k.queue, k.dropped = k.queue[n:], k.dropped+n
		}
		if msg := err.Error(); msg != k.logged {
			k.logf("the audit trail cannot be written to the cluster (%v); the lines wait, and stay in this agent's log", err)
			k.logged = msg
		}
		k.backoff = min(max(2*k.backoff, auditFlushEvery), auditBackoffMax)
		k.retryAt = time.Now().Add(k.backoff)
		return
	}
	k.backoff, k.retryAt = 0, time.Time{}
	if k.logged != "" {
		k.logf("the audit trail is written to the cluster again")
		k.logged = ""
	}
}

// append adds lines to the current slot, or turns the ring; a conflict
// rereads the ring and tries again.
func (k *AuditKeeper) append(ctx context.Context, lines []byte) error {
	if len(lines) > AuditSlotMax {
		lines = lines[len(lines)-AuditSlotMax:]
		lines = lines[bytes.IndexByte(lines, '\n')+1:] // whole lines only
	}
	for try := 0; ; try++ {
		if k.ring == nil {
			if err := k.load(ctx); err != nil {
				return err
			}
		}
		i, data := k.cur, k.ring[k.cur].data
		if len(data)+len(lines) > AuditSlotMax || tooOld(data, time.Now()) {
			i, data = (k.cur+1)%AuditRingSlots, nil
		}
		data = append(slices.Clip(data), lines...)
		version, err := k.slots.WriteAuditSlot(ctx, i, data, k.ring[i].version)
		switch {
		case err == nil:
			k.cur, k.ring[i] = i, slot{data: data, version: version}
			return nil
		case errors.Is(err, ErrAuditConflict) && try < auditTries:
			k.ring = nil
		default:
			k.ring = nil
			return err
		}
	}
}

// load reads every slot, and takes the one with the newest line as the
// current one.
func (k *AuditKeeper) load(ctx context.Context) error {
	ring := make([]slot, AuditRingSlots)
	cur, newest := 0, time.Time{}
	for i := range ring {
		data, version, err := k.slots.ReadAuditSlot(ctx, i)
		if err != nil {
			return err
		}
		ring[i] = slot{data: data, version: version}
		if t, ok := lineTime(lastLine(data)); ok && t.After(newest) {
			cur, newest = i, t
		}
	}
	k.ring, k.cur = ring, cur
	return nil
}

// tooOld says whether a slot's first line is older than its share of
// AuditMaxAge, so that the ring turns and old lines go.
func tooOld(data []byte, now time.Time) bool {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	t, ok := lineTime(line)
	return ok && now.Sub(t) > AuditMaxAge/AuditRingSlots
}

// lastLine is the last whole line of data.
func lastLine(data []byte) []byte {
	data = bytes.TrimRight(data, "\n")
	return data[bytes.LastIndexByte(data, '\n')+1:]
}

// lineTime reads the time of one audit line.
func lineTime(line []byte) (time.Time, bool) {
	var e struct {
		Time time.Time `json:"time"`
	}
	if len(line) == 0 || json.Unmarshal(line, &e) != nil {
		return time.Time{}, false
	}
	return e.Time, true
}

// ReadAuditTrail reads the trail the ring keeps: every line younger than
// AuditMaxAge, oldest first. Lines that cannot be read are skipped.
func ReadAuditTrail(ctx context.Context, slots AuditSlots) ([]AuditEvent, error) {
	var out []AuditEvent
	since := time.Now().Add(-AuditMaxAge)
	for i := range AuditRingSlots {
		data, _, err := slots.ReadAuditSlot(ctx, i)
		if err != nil {
			return nil, err
		}
		for line := range bytes.Lines(data) {
			var e AuditEvent
			if json.Unmarshal(line, &e) == nil && e.Time.After(since) {
				out = append(out, e)
			}
		}
	}
	slices.SortStableFunc(out, func(x, y AuditEvent) int { return x.Time.Compare(y.Time) })
	return out, nil
}
