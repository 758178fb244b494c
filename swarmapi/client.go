// Package swarmapi speaks the Docker Engine API over the engine's unix
// socket, with net/http alone. Package swarmplatform builds plug's Swarm
// platform on it.
//
// The client covers what the platform needs: version negotiation, services
// (with optimistic concurrency on updates), tasks, containers, networks,
// images, events and the engine's swarm state. Every failed call returns an
// *Error or a *SocketError, so callers can tell "not found" and "conflict"
// from "cannot reach the engine at all".
package swarmapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultSocket is where the engine listens when DOCKER_HOST is not set.
const DefaultSocket = "/var/run/docker.sock"

// Client is a Docker Engine API client over a unix socket. It negotiates
// the API version on first use and speaks that version from then on. A
// Client is safe for concurrent use.
type Client struct {
	socket string
	http   *http.Client

	mu      sync.Mutex
	version string  // negotiated API version, e.g. "1.41"; "" until negotiated
	engine  Version // the engine's answer to the negotiation
}

// NewClientFromEnv returns a client for the engine named by DOCKER_HOST
// (only unix:// is supported), or for DefaultSocket when it is unset.
func NewClientFromEnv() (*Client, error) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		return NewClient(DefaultSocket), nil
	}
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok || path == "" {
		return nil, fmt.Errorf("DOCKER_HOST=%s: plug speaks to the engine over its unix socket only; set DOCKER_HOST=unix:///var/run/docker.sock or unset it", host)
	}
	return NewClient(path), nil
}

// NewClient returns a client for the engine listening on the unix socket
// at path. Nothing is dialled until the first call.
func NewClient(path string) *Client {
	return newClient(path, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
}

// newClient builds a client whose connections come from dial; tests use it
// to inject faults the real socket cannot produce on demand.
func newClient(path string, dial func(context.Context) (net.Conn, error)) *Client {
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dial(ctx)
			if err != nil {
				return nil, socketError(path, err)
			}
			return conn, nil
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{socket: path, http: &http.Client{Transport: transport}}
}

// Socket is the path of the engine's unix socket.
func (c *Client) Socket() string { return c.socket }

// APIVersion negotiates the API version with the engine on first use and
// returns it. It fails with a *VersionError when the engine is too old for
// plug or too new to speak any version plug knows; a failure is not kept, so
// the next call asks the engine again.
func (c *Client) APIVersion(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != "" {
		return c.version, nil
	}
	var v Version
	if err := c.call(ctx, http.MethodGet, "/version", nil, nil, &v); err != nil {
		return "", err
	}
	version, err := negotiate(v)
	if err != nil {
		return "", err
	}
	c.version, c.engine = version, v
	return version, nil
}

// Engine returns the engine's version answer, negotiating first if needed.
func (c *Client) Engine(ctx context.Context) (Version, error) {
	if _, err := c.APIVersion(ctx); err != nil {
		return Version{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.engine, nil
}

// do calls the engine at the negotiated API version: method on path with
// query, sending in as JSON when it is not nil and decoding the answer into
// out when it is not nil.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	v, err := c.APIVersion(ctx)
	if err != nil {
		return err
	}
	return c.call(ctx, method, "/v"+v+path, query, in, out)
}

// call is do without the version prefix.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	resp, err := c.send(ctx, method, path, query, in)
	if err != nil {
		return err
	}
	if err := readAnswer(resp, out); err != nil {
		return fmt.Errorf("reading the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// readAnswer decodes the JSON body of resp into out or, when out is nil,
// reads the body to its end so that the connection serves the next call;
// either way it closes the body.
func readAnswer(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if out == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// send makes a request and returns the engine's successful answer, whose
// body the caller closes; a failed answer is returned as an *Error.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	u := "http://docker" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if se, ok := asSocketError(err); ok {
			return nil, se
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, responseError(method, path, resp)
	}
	return resp, nil
}

// list is the engine's answer to GET path for the objects matching filter.
func list[T any](ctx context.Context, c *Client, path string, filter map[string][]string) ([]T, error) {
	var out []T
	err := c.do(ctx, http.MethodGet, path, filters(filter), nil, &out)
	return out, err
}

// get is the engine's answer to GET path?query for one object.
func get[T any](ctx context.Context, c *Client, path string, query url.Values) (*T, error) {
	var out T
	if err := c.do(ctx, http.MethodGet, path, query, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// filters encodes the engine's filter argument: {"key":["value",...]}.
func filters(kv map[string][]string) url.Values {
	b, _ := json.Marshal(kv) // a map of string slices always encodes
	return url.Values{"filters": {string(b)}}
}
