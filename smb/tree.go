//go:build linux

package smb

import (
	"encoding/binary"
	"strings"

	"plug/smb/internal/wire"
)

// tree is a tree connect: the share or IPC$.
type tree struct {
	id      uint32
	sess    *session
	ipc     bool
	encrypt bool
}

const (
	shareTypeDisk = 1
	shareTypePipe = 2
	// fileAllAccess is every standard and file-specific access right.
	fileAllAccess uint32 = 0x001F01FF
)

// tree is the session's tree connect id, or nil.
func (s *session) tree(id uint32) *tree {
	s.conn.mu.Lock()
	defer s.conn.mu.Unlock()
	return s.trees[id]
}

func (c *conn) treeConnect(r *request) uint32 {
	b := r.body
	if len(b) < 8 || binary.LittleEndian.Uint16(b) != 9 {
		return wire.StatusInvalidParameter
	}
	raw, err := wire.Field(r.msg, uint32(binary.LittleEndian.Uint16(b[4:])), uint32(binary.LittleEndian.Uint16(b[6:])), wire.HeaderSize+8)
	if err != nil {
		return wire.StatusInvalidParameter
	}
	path, err := wire.DecodeUTF16(raw)
	if err != nil {
		return wire.StatusBadNetworkName
	}
	// \\server\share: only the share's name matters.
	name := path[strings.LastIndexByte(path, '\\')+1:]
	t := &tree{sess: r.sess}
	switch {
	case strings.EqualFold(name, "IPC$"):
		t.ipc = true
	case strings.EqualFold(name, c.srv.cfg.Share):
	default:
		return wire.StatusBadNetworkName
	}
	c.mu.Lock()
	if len(r.sess.trees) >= maxTrees {
		c.mu.Unlock()
		return wire.StatusInsufficientResources
	}
	r.sess.nextTree++
	t.id = r.sess.nextTree
	r.sess.trees[t.id] = t
	c.mu.Unlock()
	r.tree = t
	le := binary.LittleEndian
	r.out = le.AppendUint16(r.out, 16)
	if t.ipc {
		r.out = append(r.out, shareTypePipe, 0)
		r.out = le.AppendUint32(r.out, 0x30) // no offline caching
	} else {
		r.out = append(r.out, shareTypeDisk, 0)
		r.out = le.AppendUint32(r.out, 0)
	}
	r.out = le.AppendUint32(r.out, 0)
	r.out = le.AppendUint32(r.out, fileAllAccess)
	return wire.StatusSuccess
}

// treeDisconnect answers TREE_DISCONNECT.
func (c *conn) treeDisconnect(r *request) uint32 {
	return bareExchange(r, func() { c.disconnectTree(r.tree, false) })
}

// disconnectTree closes a tree connect and the files opened on it; with
// keep, durable and resilient opens are parked for their client to
// reconnect to instead (see durable.go).
func (c *conn) disconnectTree(t *tree, keep bool) {
	c.mu.Lock()
	delete(t.sess.trees, t.id)
	var opens []*open
	for _, o := range c.opens {
		if o.tree == t {
			opens = append(opens, o)
		}
	}
	c.mu.Unlock()
	for _, o := range opens {
		if keep {
			c.park(o)
		} else {
			c.closeOpen(o)
		}
	}
}
