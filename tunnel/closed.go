package tunnel

import (
	"context"
	"time"
)

// isClosed reports whether ch, a channel closed to say something happened
// and never sent on, is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// untilClosed is context.WithTimeout(parent, timeout), ended too when
// gone is closed (a connection that went away while its work was done).
func untilClosed(parent context.Context, timeout time.Duration, gone <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	go func() {
		select {
		case <-gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
