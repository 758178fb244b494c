package k8sapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Client talks to one API server. It is safe for concurrent use.
type Client struct {
	base     *url.URL
	http     *http.Client
	upgrade  *http.Client // HTTP/1.1 only, for WebSocket upgrades
	token    func() (string, error)
	failures failures
}

// failures counts the requests that failed, by HTTP status (0: no answer).
type failures struct {
	mu     sync.Mutex
	byCode map[int]uint64
}

func (f *failures) add(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byCode == nil {
		f.byCode = map[int]uint64{}
	}
	f.byCode[code]++
}

// Failures returns how many requests of c failed so far, by the HTTP
// status the API server answered (0: it did not answer), for metrics.
func (c *Client) Failures() map[int]uint64 {
	c.failures.mu.Lock()
	defer c.failures.mu.Unlock()
	return maps.Clone(c.failures.byCode)
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("the API server address %q is not an http(s) URL", cfg.Server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	var tlsCfg *tls.Config
	if cfg.TLS != nil {
		tlsCfg = cfg.TLS.Clone() // the transport adds its protocols to it: keep the caller's as it was
	}
	transport := &http.Transport{
		Proxy:                 nil, // the API server is reached directly, never through HTTP(S)_PROXY
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
	}
	// An upgrade to a WebSocket (exec.go) needs HTTP/1.1: a transport of
	// its own that never offers HTTP/2.
	upgrade := transport.Clone()
	upgrade.ForceAttemptHTTP2 = false
	upgrade.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if cfg.TLS != nil {
		upgrade.TLSClientConfig = cfg.TLS.Clone()
		upgrade.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return &Client{base: u, http: &http.Client{Transport: transport}, upgrade: &http.Client{Transport: upgrade}, token: cfg.Token}, nil
}

// request is one call of the REST API.
type request struct {
	method      string
	path        string     // escaped path below the server's base URL
	query       url.Values // may be nil
	body        any        // encoded as JSON; nil for none
	contentType string     // of the body; application/json when empty
}

// send performs r and returns the response of a success. A failure is
// returned as an *APIError decoded from the server's Status; the response
// body is then already closed.
// Host is the API server's host:port as the client reaches it.
func (c *Client) Host() string { return c.base.Host }

func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.failures.add(0)
		return nil, fmt.Errorf("kubernetes API %s %s: %w", r.method, r.path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	c.failures.add(resp.StatusCode)
	defer resp.Body.Close()
	return nil, decodeFailure(r.method, r.path, resp)
}

// newRequest is the HTTP request of r, with the caller's credentials.
func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("encoding the body of %s %s: %w", r.method, r.path, err)
		}
		body = bytes.NewReader(b)
	}
	u := *c.base
	u.Path += r.path
	u.RawPath = c.base.Path + r.path
	u.RawQuery = r.query.Encode()
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.token != nil {
		tok, err := c.token()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// decodeFailure turns a failed response into an *APIError.
func decodeFailure(method, path string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Method: method, Path: path, Code: resp.StatusCode}
	var st Status
	if json.Unmarshal(raw, &st) == nil && (st.Reason != "" || st.Message != "") {
		e.Reason, e.Text = st.Reason, st.Message
	} else {
		e.Text = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
	}
	if e.Reason == "" {
		e.Reason = reasonFor(resp.StatusCode)
	}
	return e
}

// do performs r and decodes a success's body into out (unless out is nil).
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("kubernetes API %s %s: decoding the answer: %w", r.method, r.path, err)
	}
	return nil
}

// IsTemporary reports whether err may go away by itself, so the same call
// is worth making again later: the API server could not be reached, or it
// answered that it is overloaded or unavailable. Answers about the request
// itself (not found, forbidden, conflict, invalid) are not temporary.
func IsTemporary(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var api *APIError
	if errors.As(err, &api) {
		switch api.Code {
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return true
}
