package swarmapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Event is one of the engine's events.
type Event struct {
	Type   string // "service", "network", "container", ...
	Action string // "create", "update", "remove", ...
	Actor  struct {
		ID         string
		Attributes map[string]string
	}
}

// Events calls each for every event matching filter (e.g. "type":
// ["service"]) from now on, until ctx ends (it then returns ctx.Err()) or
// the engine closes the stream.
func (c *Client) Events(ctx context.Context, filter map[string][]string, each func(Event)) error {
	v, err := c.APIVersion(ctx)
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, http.MethodGet, "/v"+v+"/events", filters(filter), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var e Event
		if err := dec.Decode(&e); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return errors.New("the engine ended its event stream")
			}
			return fmt.Errorf("reading the engine's events: %w", err)
		}
		each(e)
	}
}
