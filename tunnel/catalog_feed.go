package tunnel

import (
	"maps"
	"slices"
	"sync"
)

// encodedFrames are catalog messages encoded as control frames once, sent
// as they are to every run that needs them.
type encodedFrames [][]byte

// encodeCatalog encodes msgs. A message too large for a frame cannot be
// made (splitCatalog keeps each well below), and would be left out.
func encodeCatalog(msgs []catalogMsg) encodedFrames {
	frames := make(encodedFrames, 0, len(msgs))
	for _, m := range msgs {
		if b, err := encodeFrame(m); err == nil {
			frames = append(frames, b)
		}
	}
	return frames
}

// frameKinds are the ways a catalog is encoded for runs: its names'
// aliases as they are, or as forms (for CLIs whose hello said Forms).
type frameKinds [2]encodedFrames

// kind is where frames with forms, or without, are in frameKinds.
func kind(withForms bool) int {
	if withForms {
		return 1
	}
	return 0
}

// maxCatalogChanges is how many of its last changes the agent keeps, so
// that a run told an earlier catalog gets only what changed since; a run
// further behind gets the whole catalog again. The changes kept hold at
// most a catalogChangesShare of the names the catalog holds (the newest
// change always kept): a run further behind is told the whole catalog,
// at most that many times what the changes would have cost it, and a
// burst of changes to a large namespace (10,000 Services made in a
// minute) leaves the agent a quarter of its names' worth of changes to
// keep, not all of them.
const (
	maxCatalogChanges   = 64
	catalogChangesShare = 4
)

// catalogFeed is the agent's catalog as the runs are told it. Each change
// gets a version; the agent keeps the last changes (at most
// maxCatalogChanges, and no more names than a catalogChangesShare of the
// catalog's), computed
// once for every run, and the frames of the whole catalog and of the last
// change, each encoded once for every run (once for each of frameKinds).
// A change of one name thus
// costs each run one small message, whatever the cluster holds, and the
// agent encodes it once.
type catalogFeed struct {
	mu      sync.Mutex
	current Catalog       // every name, with those runs are not told (Unlisted)
	listed  []ClusterName // the names runs are told, sorted
	known   bool
	version uint64          // 1 for the first catalog, one more at each change
	changes []catalogChange // the last ones, oldest first, the newest leading to version
	kept    int             // the names and gone names in changes
	whole   frameKinds      // the whole catalog at version, once made
	changed broadcast       // woken at each change
}

// catalogChange is what one change of the catalog did to the names runs
// are told.
type catalogChange struct {
	version uint64        // the version it leads to
	set     []ClusterName // added or changed
	gone    []string      // removed
	frames  frameKinds    // it alone, for the runs told the version before; once made
}

// get returns the catalog with every name (for the agent's own use),
// whether there is one yet, and a channel closed at the next change.
func (f *catalogFeed) get() (Catalog, bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current, f.known, f.changed.next()
}

// set replaces the catalog (normalized: names sorted), records what
// changed for the runs, and wakes those waiting on it.
func (f *catalogFeed) set(c Catalog) {
	f.mu.Lock()
	defer f.mu.Unlock()
	shareUnchanged(f.current.Names, c.Names)
	unlisted := func(n ClusterName) bool { return n.Unlisted }
	listed := c.Names // shared while no name is unlisted: neither is changed
	if slices.ContainsFunc(listed, unlisted) {
		listed = slices.DeleteFunc(slices.Clone(listed), unlisted)
	}
	if f.known {
		set, gone := DiffNames(f.listed, listed)
		f.changes = append(f.changes, catalogChange{version: f.version + 1, set: set, gone: gone})
		f.kept += len(set) + len(gone)
		for len(f.changes) > maxCatalogChanges || len(f.changes) > 1 && f.kept > len(listed)/catalogChangesShare {
			f.kept -= len(f.changes[0].set) + len(f.changes[0].gone)
			f.changes = f.changes[1:]
		}
	}
	f.current, f.listed, f.known, f.whole = c, listed, true, frameKinds{}
	f.version++
	f.changed.wake()
}

// update returns the frames that bring a run told version since (0:
// none yet) to the current catalog, the current version, and a channel
// closed at the next change. With deltas the run gets only what changed,
// if the changes since reach back that far; otherwise the whole catalog.
// withForms: the aliases go as forms (catalogMsg.Forms). No frames: the
// run is current, or there is no catalog yet. The frames are shared: the
// caller only sends them.
func (f *catalogFeed) update(since uint64, deltas, withForms bool) (encodedFrames, uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := f.changed.next()
	if !f.known || since == f.version {
		return nil, since, changed
	}
	if deltas && since > 0 && len(f.changes) > 0 && f.changes[0].version <= since+1 {
		head := catalogMsg{Delta: true, Notes: f.current.Notes, Unavailable: f.current.Unavailable}
		if last := &f.changes[len(f.changes)-1]; last.version == since+1 {
			if last.frames[kind(withForms)] == nil {
				last.frames[kind(withForms)] = encodeCatalog(splitCatalog(head, last.set, last.gone, withForms))
			}
			return last.frames[kind(withForms)], f.version, changed
		}
		set, gone := mergeChanges(f.changes, since)
		return encodeCatalog(splitCatalog(head, set, gone, withForms)), f.version, changed
	}
	if f.whole[kind(withForms)] == nil {
		f.whole[kind(withForms)] = encodeCatalog(catalogFrames(Catalog{Names: f.listed, Notes: f.current.Notes, Unavailable: f.current.Unavailable}, withForms))
	}
	return f.whole[kind(withForms)], f.version, changed
}

// DiffNames returns the names of to that from lacks or has otherwise
// (other aliases or ports), and the names of from that to lacks. from and
// to are sorted by name, each name once (as a Session's Catalog is); so
// are the lists returned.
func DiffNames(from, to []ClusterName) (set []ClusterName, gone []string) {
	i, j := 0, 0
	for i < len(from) || j < len(to) {
		switch {
		case j == len(to) || i < len(from) && from[i].Name < to[j].Name:
			gone = append(gone, from[i].Name)
			i++
		case i == len(from) || to[j].Name < from[i].Name:
			set = append(set, to[j])
			j++
		default:
			if !sameListed(from[i], to[j]) {
				set = append(set, to[j])
			}
			i++
			j++
		}
	}
	return set, gone
}

// shareUnchanged makes each name of to that from has alike the value from
// holds (its aliases and ports): a name the catalog keeps across changes
// is held once, not once for each catalog that lists it. from and to are
// sorted by name.
func shareUnchanged(from, to []ClusterName) {
	i := 0
	for j := range to {
		for i < len(from) && from[i].Name < to[j].Name {
			i++
		}
		if i < len(from) && sameListed(from[i], to[j]) && slices.Equal(from[i].Protected, to[j].Protected) && from[i].Unlisted == to[j].Unlisted {
			to[j] = from[i]
		}
	}
}

// mergeChanges folds the changes after version since into one: the last
// word on each name counts.
func mergeChanges(changes []catalogChange, since uint64) (set []ClusterName, gone []string) {
	last := map[string]*ClusterName{} // nil: gone
	for _, ch := range changes {
		if ch.version <= since {
			continue
		}
		for i := range ch.set {
			last[ch.set[i].Name] = &ch.set[i]
		}
		for _, g := range ch.gone {
			last[g] = nil
		}
	}
	for _, name := range slices.Sorted(maps.Keys(last)) {
		if n := last[name]; n != nil {
			set = append(set, *n)
		} else {
			gone = append(gone, name)
		}
	}
	return set, gone
}

// sameListed reports whether a run is told the same of a and b.
func sameListed(a, b ClusterName) bool {
	return a.Name == b.Name && slices.Equal(a.Aliases, b.Aliases) && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.UDPPorts, b.UDPPorts)
}
