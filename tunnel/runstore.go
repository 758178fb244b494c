package tunnel

import (
	"errors"
	"maps"
	"slices"
	"sync"
)

// Helpers for the platforms' RunStore.

// WrittenRecords is the set of the records of runs an agent wrote, each
// by the name its platform stores it under: what its heartbeat renews.
// The zero value is empty and ready; it is safe for concurrent use.
type WrittenRecords struct {
	mu    sync.Mutex
	names map[string]bool
}

// Add notes that the agent wrote the record name.
func (w *WrittenRecords) Add(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names == nil {
		w.names = map[string]bool{}
	}
	w.names[name] = true
}

// Remove notes that the record name is gone.
func (w *WrittenRecords) Remove(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.names, name)
}

// Names returns the names of the records written, in no particular order.
func (w *WrittenRecords) Names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.names))
}

// MarkEnded is EndRun for a platform that keeps the records of runs as
// objects R: of objs, it marks with mark each one that live reads as a
// live record of run opened by key, and returns how many it marked, with
// the errors of those it could not. mark returns nil for an object gone
// meanwhile.
func MarkEnded[R any](objs []R, run, key string, live func(R) (RunRecord, bool), mark func(R) error) (int, error) {
	n := 0
	var errs []error
	for _, o := range objs {
		if rec, ok := live(o); !ok || rec.Run != run || rec.Key != key {
			continue
		}
		if err := mark(o); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
