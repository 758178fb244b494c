package tunnel

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
)

// Catalog returns what the agent last said the run can consume (its Names
// sorted by name, each once), whether it has said anything yet, and a
// channel closed at the next change. While the session reconnects, the
// last catalog stands.
func (s *Session) Catalog() (Catalog, bool, <-chan struct{}) { return s.names.get() }

// AskNames has the agent tell the session the catalog from now on, when
// ClientConfig.NamesWhenAsked held it back (otherwise it comes anyway): on
// the current connection at once, on the next ones from their hello. It
// does not wait: Catalog shows the catalog once it has come.
func (s *Session) AskNames() {
	s.namesAsked.Store(true)
	s.askNamesOn(s.current())
}

// askNamesOn asks for the catalog on cc, the session's connection now, if
// AskNames was called and cc's agent waits to be asked.
func (s *Session) askNamesOn(cc *clientConn) {
	if cc != nil && s.namesAsked.Load() && cc.welcome.NamesWhenAsked {
		cc.namesOnce.Do(func() { cc.control.send(namesMsg{}) })
	}
}

// Carry joins c, a connection a local program opened, to address
// ("name:port") in the cluster, through the agent, until both directions
// end; then c is closed. When no way opens — the agent cannot reach
// address (a *DialError, at once), the session ended, ctx ended first —
// Carry returns why and leaves c open, for the caller to refuse it as it
// sees fit.
func (s *Session) Carry(ctx context.Context, c net.Conn, address string) error {
	local := rawIO(c)
	remote, st, err := s.open(ctx, "direct-tcpip", address, local, nil)
	if err != nil {
		return err
	}
	if st != nil {
		st.carry(remote.Channel)
		return nil
	}
	pipe(local, remote)
	return nil
}

// pendingCatalog is a catalog, or a change of it, whose messages are
// arriving.
type pendingCatalog struct {
	head  catalogMsg // the first message: Notes, Unavailable, Delta
	names []ClusterName
	gone  []string
	full  bool     // names past maxCatalogNames were dropped
	bad   []string // the names dropped for a form their first message lacks
}

// takeCatalog collects the messages of one catalog, or of one change of
// it, and at its last makes the session's catalog of it. Names past
// maxCatalogNames are dropped with a note, and so are names whose aliases
// are a form the first message lacks or that makes them too long.
func (cc *clientConn) takeCatalog(m catalogMsg) {
	p := cc.pendingCatalog
	if p == nil {
		p = &pendingCatalog{head: m}
		cc.pendingCatalog = p
	}
	for _, n := range m.Names {
		if len(p.names) == maxCatalogNames {
			p.full = true
			break
		}
		aliases, ok := aliasesOf(n, p.head.Forms)
		if !ok {
			p.bad = append(p.bad, printable(n.Name))
			continue
		}
		p.names = append(p.names, ClusterName{Name: n.Name, Aliases: aliases, Ports: n.Ports, UDPPorts: n.UDP})
	}
	p.gone = append(p.gone, m.Gone[:min(len(m.Gone), maxCatalogNames-len(p.gone))]...)
	if m.More {
		return
	}
	cc.pendingCatalog = nil
	names := sortedNames(p.names)
	if p.head.Delta {
		cur, _, _ := cc.s.names.get()
		names = applyNames(cur.Names, names, p.gone)
	}
	if len(names) > maxCatalogNames {
		names, p.full = names[:maxCatalogNames], true
	}
	notes := p.head.Notes
	if p.full {
		notes = append(slices.Clip(notes), fmt.Sprintf("the cluster has more than %d names; this run knows the first %d", maxCatalogNames, maxCatalogNames))
	}
	if len(p.bad) > 0 {
		notes = append(slices.Clip(notes), fmt.Sprintf("the agent sent %d name(s) this run cannot use, with aliases it did not describe or longer than %d characters: %s", len(p.bad), maxHostLen, strings.Join(p.bad[:min(len(p.bad), 3)], ", ")))
	}
	cc.s.names.set(Catalog{Names: names, Notes: notes, Unavailable: p.head.Unavailable})
}

// applyNames returns names (sorted by name, each once) with the names of
// set added or replaced and those of gone removed, sorted by name: merged,
// so that a change costs a run one pass over the names it knows.
func applyNames(names, set []ClusterName, gone []string) []ClusterName {
	set = sortedNames(set)
	slices.Sort(gone)
	out := make([]ClusterName, 0, len(names)+len(set))
	g := 0
	keep := func(n ClusterName) {
		for g < len(gone) && gone[g] < n.Name {
			g++
		}
		if g == len(gone) || gone[g] != n.Name {
			out = append(out, n)
		}
	}
	i, j := 0, 0
	for i < len(names) || j < len(set) {
		if j == len(set) || i < len(names) && names[i].Name < set[j].Name {
			keep(names[i])
			i++
			continue
		}
		if i < len(names) && names[i].Name == set[j].Name {
			i++ // replaced
		}
		keep(set[j])
		j++
	}
	return out
}

// sortedNames sorts names by name, in place, and keeps each name once (the
// last given): the agent sends them sorted, which costs a pass to check.
func sortedNames(names []ClusterName) []ClusterName {
	byName := func(a, b ClusterName) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(names, byName) {
		slices.SortStableFunc(names, byName)
	}
	out := names[:0]
	for i, n := range names {
		if i+1 == len(names) || names[i+1].Name != n.Name {
			out = append(out, n)
		}
	}
	return out
}
