package swarmapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Event is one of the engine's events.
type Event struct {
	Type   string // "service", "network", "container", ...
	Action string // "create", "update", "remove", ...
	Actor  struct {
		ID         string
		Attributes map[string]string
	}
	TimeNano int64 `json:"timeNano"` // when, by the engine's clock
}

// Events calls each for every event matching filter (e.g. "type":
// ["service"]) until ctx ends (it then returns ctx.Err()) or the engine
// closes the stream. With a zero since, the stream begins once the engine
// has answered the request: a change made while the request was on its way
// is missed. Else the engine first sends the events it keeps (its last 256)
// from since on, by its own clock, which an engine on a local socket shares
// with this machine: a caller that must miss no change after some moment
// passes that moment.
func (c *Client) Events(ctx context.Context, since time.Time, filter map[string][]string, each func(Event)) error {
	v, err := c.APIVersion(ctx)
	if err != nil {
		return err
	}
	query := filters(filter)
	if !since.IsZero() {
		query.Set("since", fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()))
	}
	resp, err := c.send(ctx, http.MethodGet, "/v"+v+"/events", query, nil)
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
