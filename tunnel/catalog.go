package tunnel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Catalog is what an agent tells its runs about the names they can
// consume: every name the cluster's workloads reach from the agent.
type Catalog struct {
	Names []ClusterName
	// Notes are lines for the developer about names left out or cut
	// short, e.g. a Service with more ports than a run is told about.
	Notes []string
	// Unavailable says why the agent cannot tell the names (or why the
	// names may be out of date), when that is so.
	Unavailable string
}

// Limits of the catalog, so that one message stays small whatever a
// cluster holds.
const (
	// MaxNamePorts is how many ports of one name a run is told about.
	MaxNamePorts = 4096
	// maxNameAliases is how many aliases of one name a run is told about.
	maxNameAliases = 16
	// maxHostLen is the longest name or alias on the wire: a DNS name.
	maxHostLen = 253
	// maxCatalogNames bounds the names a client accepts in one catalog,
	// maxCatalogNotes the notes that go with it.
	maxCatalogNames = 20000
	maxCatalogNotes = 8
	// maxCatalogForms bounds the lists of alias endings one catalog or
	// change shares among its names (catalogMsg.Forms).
	maxCatalogForms = 64
	// catalogFrameBudget is where a catalog is split into another frame,
	// well below maxControlFrame, and small: x/crypto/ssh keeps buffers as
	// large as the largest write for each connection (its channel's packet,
	// its cipher's), and frames of 48 KiB left some 80 KiB in the agent for
	// every run it told the catalog of 2,000 Services; frames of 8 KiB, 20.
	catalogFrameBudget = 8 << 10
)

// catalogMsg carries a catalog, agent to CLI: the whole of it when the run
// starts (and at each change, to a CLI that did not ask for deltas), then
// only what changed. A large catalog or change is split over several
// messages: all but the last have More set, and the CLI takes it once the
// last has arrived.
type catalogMsg struct {
	Names       []catalogName `json:"names"`
	More        bool          `json:"more,omitempty"`
	Notes       []string      `json:"notes,omitempty"`
	Unavailable string        `json:"unavailable,omitempty"`
	// Delta says the message is a change of the last catalog, sent only
	// to a CLI whose hello asked for deltas: Names are the names added or
	// changed, Gone the names removed, and Notes and Unavailable replace
	// the last ones.
	Delta bool     `json:"delta,omitempty"`
	Gone  []string `json:"gone,omitempty"`
	// Forms are lists of alias endings that the names of a catalog or
	// change share, in its first message, sent only to a CLI whose hello
	// said Forms: a name with Form i has as aliases its name followed by
	// each ending of Forms[i-1] (a Kubernetes namespace's web.shop,
	// web.shop.svc and web.shop.svc.cluster.local are web followed by the
	// namespace's one list), so each name costs the bytes of its name and
	// ports only.
	Forms [][]string `json:"forms,omitempty"`
}

// catalogName is a ClusterName on the wire.
type catalogName struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
	Ports   []int    `json:"ports"`
	// UDP are the UDP ports; older CLIs ignore the field.
	UDP []int `json:"udp,omitempty"`
	// Form, from 1, says the name's aliases are those of the catalog's
	// Forms[Form-1], Aliases being empty; 0: Aliases are all of them.
	Form int `json:"form,omitempty"`
}

// normalize sorts the catalog's names and their ports, drops duplicate
// ports, and cuts a name's ports or aliases at the limits, with a note.
func normalize(c Catalog) Catalog {
	out := Catalog{Notes: slices.Clone(c.Notes), Unavailable: c.Unavailable}
	if len(c.Names) > 0 {
		out.Names = make([]ClusterName, 0, len(c.Names)) // a burst of changes of a large namespace makes many catalogs
	}
	for _, n := range c.Names {
		ports := cleanPorts(n.Ports)
		udp := cleanPorts(n.UDPPorts)
		if len(udp) > MaxNamePorts {
			udp = udp[:MaxNamePorts]
		}
		if len(ports) > MaxNamePorts {
			if len(out.Notes) < maxCatalogNotes {
				out.Notes = append(out.Notes, fmt.Sprintf("%s has %d ports; runs are told the first %d (up to port %d)", n.Name, len(ports), MaxNamePorts, ports[MaxNamePorts-1]))
			}
			ports = ports[:MaxNamePorts]
		}
		aliases := slices.Clone(n.Aliases)
		if len(aliases) > maxNameAliases {
			aliases = aliases[:maxNameAliases]
		}
		out.Names = append(out.Names, ClusterName{Name: n.Name, Aliases: aliases, Ports: ports, UDPPorts: udp, Protected: slices.Clone(n.Protected), Unlisted: n.Unlisted})
	}
	slices.SortFunc(out.Names, func(a, b ClusterName) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// cleanPorts returns ports sorted, each once, without those out of range.
func cleanPorts(ports []int) []int {
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	return slices.DeleteFunc(ports, func(p int) bool { return CheckPort(p) != nil })
}

// catalogFrames splits the whole catalog c into messages that each fit a
// control frame, its names' aliases sent as forms when withForms.
func catalogFrames(c Catalog, withForms bool) []catalogMsg {
	return splitCatalog(catalogMsg{Notes: c.Notes, Unavailable: c.Unavailable}, c.Names, nil, withForms)
}

// splitCatalog splits head, with names and gone, into messages that each
// fit a control frame: the first carries head's fields, each carries some
// of the names and of gone. withForms: the names' aliases go as forms
// (catalogMsg.Forms) where they can.
func splitCatalog(head catalogMsg, names []ClusterName, gone []string, withForms bool) []catalogMsg {
	var form []int
	if withForms {
		head.Forms, form = aliasForms(names)
	}
	msgs := []catalogMsg{head}
	b, _ := json.Marshal(head)
	size := len(b)
	room := func(n int) *catalogMsg {
		cur := &msgs[len(msgs)-1]
		if len(cur.Names)+len(cur.Gone) > 0 && size+n > catalogFrameBudget {
			cur.More = true
			msgs = append(msgs, catalogMsg{Delta: head.Delta})
			cur, size = &msgs[len(msgs)-1], 0
		}
		size += n + 1
		return cur
	}
	for i, n := range names {
		wire := catalogName{Name: n.Name, Aliases: n.Aliases, Ports: n.Ports, UDP: n.UDPPorts}
		if form != nil && form[i] > 0 {
			wire.Aliases, wire.Form = nil, form[i]
		}
		b, _ := json.Marshal(wire)
		cur := room(len(b))
		cur.Names = append(cur.Names, wire)
	}
	for _, g := range gone {
		cur := room(len(g) + 3)
		cur.Gone = append(cur.Gone, g)
	}
	return msgs
}

// aliasForms finds the lists of alias endings names share: form[i] is,
// from 1, the list of forms that names[i]'s aliases are its name followed
// by, or 0 for a name whose aliases are sent as they are (none, one that
// does not start with the name and a dot, or forms full).
func aliasForms(names []ClusterName) (forms [][]string, form []int) {
	form = make([]int, len(names))
	index := map[string]int{} // the endings joined by "\x00": their form
	for i, n := range names {
		if len(n.Aliases) == 0 {
			continue
		}
		endings := make([]string, 0, len(n.Aliases))
		for _, a := range n.Aliases {
			end, ok := strings.CutPrefix(a, n.Name)
			if !ok || !strings.HasPrefix(end, ".") {
				break
			}
			endings = append(endings, end)
		}
		if len(endings) < len(n.Aliases) {
			continue
		}
		key := strings.Join(endings, "\x00")
		if index[key] == 0 && len(forms) < maxCatalogForms {
			forms = append(forms, endings)
			index[key] = len(forms)
		}
		form[i] = index[key]
	}
	return forms, form
}

// aliasesOf returns the aliases of n, a name of a catalog or change whose
// first message had forms: its own, or its form's; false if the form is
// not one of forms or makes an alias too long.
func aliasesOf(n catalogName, forms [][]string) ([]string, bool) {
	if n.Form == 0 {
		return n.Aliases, true
	}
	if n.Form > len(forms) {
		return nil, false
	}
	aliases := make([]string, 0, len(forms[n.Form-1]))
	for _, end := range forms[n.Form-1] {
		if len(n.Name)+len(end) > maxHostLen {
			return nil, false
		}
		aliases = append(aliases, n.Name+end)
	}
	return aliases, true
}

// check takes a catalog message as the agent sent it. A name the CLI
// cannot use (too long, too many ports, a port out of range) is left out
// with a note rather than failing the whole message: the other names keep
// working.
func (m *catalogMsg) check() error {
	if err := checkText(&m.Unavailable); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	if len(m.Notes) > maxCatalogNotes {
		m.Notes = m.Notes[:maxCatalogNotes]
	}
	for i := range m.Notes {
		if err := checkText(&m.Notes[i]); err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
	}
	kept := m.Names[:0]
	for _, n := range m.Names {
		if why := badCatalogName(n); why != "" {
			if len(m.Notes) < maxCatalogNotes {
				m.Notes = append(m.Notes, "the agent sent a name this run cannot use: "+why)
			}
			continue
		}
		kept = append(kept, n)
	}
	m.Names = kept
	m.Gone = slices.DeleteFunc(m.Gone, func(g string) bool { return g == "" || len(g) > maxHostLen })
	if len(m.Forms) > maxCatalogForms {
		return fmt.Errorf("catalog: %d forms, more than %d", len(m.Forms), maxCatalogForms)
	}
	for _, f := range m.Forms {
		if len(f) == 0 || len(f) > maxNameAliases || slices.ContainsFunc(f, func(end string) bool { return end == "" || len(end) > maxHostLen }) {
			return fmt.Errorf("catalog: a form of %d endings, or one empty or longer than %d characters", len(f), maxHostLen)
		}
	}
	return nil
}

// badCatalogName says what is wrong with n, or "".
func badCatalogName(n catalogName) string {
	short := printable(n.Name)
	if len(short) > 64 {
		short = short[:64] + "…"
	}
	switch {
	case n.Name == "" || len(n.Name) > maxHostLen:
		return fmt.Sprintf("%q is empty or longer than %d characters", short, maxHostLen)
	case len(n.Aliases) > maxNameAliases:
		return fmt.Sprintf("%s has %d aliases, more than %d", short, len(n.Aliases), maxNameAliases)
	case n.Form < 0 || n.Form > maxCatalogForms || n.Form > 0 && len(n.Aliases) > 0:
		return fmt.Sprintf("%s has form %d, with %d aliases of its own", short, n.Form, len(n.Aliases))
	case len(n.Ports) > MaxNamePorts || len(n.UDP) > MaxNamePorts:
		return fmt.Sprintf("%s has more than %d ports of one protocol", short, MaxNamePorts)
	}
	for _, a := range n.Aliases {
		if a == "" || len(a) > maxHostLen {
			return fmt.Sprintf("%s has an alias that is empty or longer than %d characters", short, maxHostLen)
		}
	}
	for _, p := range slices.Concat(n.Ports, n.UDP) {
		if CheckPort(p) != nil {
			return fmt.Sprintf("%s has port %d, out of range", short, p)
		}
	}
	return ""
}

// catalogState is the latest catalog, for anyone to wait on: the agent
// keeps the platform's, the client the agent's.
type catalogState struct {
	mu      sync.Mutex
	current Catalog
	known   bool
	changed broadcast // woken at each change
}

// get returns the catalog, whether there is one yet, and a channel closed
// at the next change.
func (s *catalogState) get() (Catalog, bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, s.known, s.changed.next()
}

// set replaces the catalog and wakes those waiting on it.
func (s *catalogState) set(c Catalog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current, s.known = c, true
	s.changed.wake()
}
