package swarmapi

import (
	"context"
	"net/url"
)

// Network is a network as the engine describes it.
type Network struct {
	Name       string
	ID         string `json:"Id"`
	Scope      string // "swarm" for overlay networks
	Driver     string
	Attachable bool
	Ingress    bool
	Internal   bool
	Labels     map[string]string
}

// Networks lists the networks matching filter ("driver", "name", "scope",
// "label", "id").
func (c *Client) Networks(ctx context.Context, filter map[string][]string) ([]Network, error) {
	return list[Network](ctx, c, "/networks", filter)
}

// Network inspects a network by ID or name.
func (c *Client) Network(ctx context.Context, id string) (*Network, error) {
	return get[Network](ctx, c, "/networks/"+url.PathEscape(id), nil)
}
