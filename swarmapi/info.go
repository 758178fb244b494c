package swarmapi

import (
	"context"
)

// Info is the part of GET /info plug reads: the engine and its place in a
// swarm.
type Info struct {
	ID            string
	Name          string // the node's host name
	ServerVersion string
	Swarm         SwarmInfo
}

// SwarmInfo is the engine's membership in a swarm.
type SwarmInfo struct {
	NodeID           string
	NodeAddr         string
	LocalNodeState   string // "inactive", "pending", "active", "error", "locked"
	ControlAvailable bool   // the node is a manager
	Error            string
}

// Info returns the engine's identity and swarm state.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	return get[Info](ctx, c, "/info", nil)
}
