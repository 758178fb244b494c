package swarmapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Container is a container as GET /containers/{id}/json describes it.
type Container struct {
	ID     string `json:"Id"`
	Name   string
	Config struct {
		Hostname string
		Image    string
		Labels   map[string]string
		// User is who the container's process runs as, "UID[:GID]" or
		// a name of its image's, as the service or the image said; ""
		// for root.
		User string
		// Env is the container's environment, NAME=VALUE: its image's ENV
		// with the service's or run's variables over it.
		Env []string
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
	Gateway   string // the network's gateway: the host, on a bridge
	Aliases   []string
}

// Container inspects a container by ID, ID prefix or name.
func (c *Client) Container(ctx context.Context, id string) (*Container, error) {
	return get[Container](ctx, c, "/containers/"+url.PathEscape(id)+"/json", nil)
}

// StopContainer stops a container, killing it once grace has passed. One
// that is stopped already, or gone, is no error.
func (c *Client) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	q := url.Values{"t": {strconv.Itoa(int(grace.Seconds()))}}
	err := c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/stop", q, nil, nil)
	var e *Error
	if IsNotFound(err) || errors.As(err, &e) && e.Status == http.StatusNotModified {
		return nil
	}
	return err
}
