package swarmapi

import (
	"context"
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
		Env          []string // the image's ENV, NAME=VALUE
	}
}

// Image inspects a local image by name ("repo/name:tag", with or without
// a digest) or ID.
func (c *Client) Image(ctx context.Context, name string) (*Image, error) {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return get[Image](ctx, c, "/images/"+strings.Join(parts, "/")+"/json", nil)
}
