package swarmapi

import (
	"context"
	"net/http"
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
	var out []Network
	err := c.do(ctx, http.MethodGet, "/networks", filters(filter), nil, &out)
	return out, err
}

// Network inspects a network by ID or name.
func (c *Client) Network(ctx context.Context, id string) (*Network, error) {
	var out Network
	if err := c.do(ctx, http.MethodGet, "/networks/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
