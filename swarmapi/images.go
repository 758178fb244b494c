package swarmapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// Image is the part of an image's inspection plug reads.
type Image struct {
	ID       string `json:"Id"`
	RepoTags []string
	Config   struct {
		ExposedPorts map[string]struct{} // "8080/tcp": {}
		Entrypoint   []string
		User         string
	}
}

// Image inspects a local image by name ("repo/name:tag", with or without
// a digest) or ID.
func (c *Client) Image(ctx context.Context, name string) (*Image, error) {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	var out Image
	if err := c.do(ctx, http.MethodGet, "/images/"+strings.Join(parts, "/")+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
