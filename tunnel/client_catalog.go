package tunnel

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
)

// Catalog returns what the agent last said the run can consume, whether it
// has said anything yet, and a channel closed at the next change. While the
// session reconnects, the last catalog stands.
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
	remote, st, err := s.open(ctx, "direct-tcpip", address, c)
	if err != nil {
		return err
	}
	if st != nil {
		st.carry(remote.Channel)
		return nil
	}
	pipe(c, remote)
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
	names := p.names
	if p.head.Delta {
		cur, _, _ := cc.s.names.get()
		names = applyNames(cur.Names, p.names, p.gone)
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

// applyNames returns names with the names of set added or replaced and
// those of gone removed, sorted by name.
func applyNames(names, set []ClusterName, gone []string) []ClusterName {
	byName := make(map[string]ClusterName, len(names)+len(set))
	for _, n := range names {
		byName[n.Name] = n
	}
	for _, n := range set {
		byName[n.Name] = n
	}
	for _, g := range gone {
		delete(byName, g)
	}
	return slices.SortedFunc(maps.Values(byName), func(a, b ClusterName) int { return strings.Compare(a.Name, b.Name) })
}
