package swarmapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// Config is a swarm config: a small named object of the swarm's store,
// readable back through the API. Its data never changes once created; its
// labels may (UpdateConfigLabels).
type Config struct {
	ID      string
	Version ObjectVersion
	Spec    ConfigSpec
}

// ConfigSpec is what a config holds.
type ConfigSpec struct {
	Name   string
	Labels map[string]string `json:",omitempty"`
	Data   []byte            // base64 in JSON, as the engine wants
}

// Configs lists the configs matching filter ("label" takes "key" or
// "key=value", "name" name prefixes), with their data.
func (c *Client) Configs(ctx context.Context, filter map[string][]string) ([]Config, error) {
	return list[Config](ctx, c, "/configs", filter)
}

// CreateConfig creates a config and returns its ID. A taken name is an
// error for which IsConflict holds.
func (c *Client) CreateConfig(ctx context.Context, spec ConfigSpec) (string, error) {
	var out struct{ ID string }
	if err := c.do(ctx, http.MethodPost, "/configs/create", nil, spec, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// UpdateConfigLabels replaces the labels of config cfg, which must still be
// at cfg.Version (IsOutOfSequence otherwise); its data stays.
func (c *Client) UpdateConfigLabels(ctx context.Context, cfg Config, labels map[string]string) error {
	spec := cfg.Spec
	spec.Labels = labels
	q := url.Values{"version": {strconv.FormatUint(cfg.Version.Index, 10)}}
	return c.do(ctx, http.MethodPost, "/configs/"+url.PathEscape(cfg.ID)+"/update", q, spec, nil)
}

// RemoveConfig removes a config; one already gone is an error for which
// IsNotFound holds.
func (c *Client) RemoveConfig(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/configs/"+url.PathEscape(id), nil, nil, nil)
}
