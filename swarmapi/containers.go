package swarmapi

import (
	"context"
	"net/http"
	"net/url"
)

// Container is a container as GET /containers/{id}/json describes it.
type Container struct {
	ID     string `json:"Id"`
	Name   string
	Config struct {
		Hostname string
		Image    string
		Labels   map[string]string
	}
	State struct {
		Running bool
		Status  string
	}
	NetworkSettings struct {
		Networks map[string]EndpointSettings
	}
}

// EndpointSettings is a container's place on one network.
type EndpointSettings struct {
	NetworkID string
	IPAddress string
	Aliases   []string
}

// Container inspects a container by ID, ID prefix or name.
func (c *Client) Container(ctx context.Context, id string) (*Container, error) {
	var out Container
	if err := c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
