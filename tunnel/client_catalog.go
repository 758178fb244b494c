package tunnel

import (
	"context"
	"fmt"
	"net"
)

// Catalog returns what the agent last said the run can consume, whether it
// has said anything yet, and a channel closed at the next change. While the
// session reconnects, the last catalog stands.
func (s *Session) Catalog() (Catalog, bool, <-chan struct{}) { return s.names.get() }

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

// takeCatalog collects the messages of one catalog and, at its last, makes
// it the session's. Names past maxCatalogNames are dropped with a note.
func (cc *clientConn) takeCatalog(m catalogMsg) {
	p := cc.pendingCatalog
	if p == nil {
		p = &Catalog{Notes: m.Notes, Unavailable: m.Unavailable}
		cc.pendingCatalog = p
	}
	for _, n := range m.Names {
		if len(p.Names) == maxCatalogNames {
			if !cc.catalogFull {
				p.Notes = append(p.Notes, fmt.Sprintf("the cluster has more than %d names; this run knows the first %d", maxCatalogNames, maxCatalogNames))
				cc.catalogFull = true
			}
			break
		}
		p.Names = append(p.Names, ClusterName{Name: n.Name, Aliases: n.Aliases, Ports: n.Ports, UDPPorts: n.UDP})
	}
	if m.More {
		return
	}
	cc.catalogFull = false
	cc.pendingCatalog = nil
	cc.s.names.set(*p)
}
