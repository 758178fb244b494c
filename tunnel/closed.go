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

// broadcast wakes all who wait for the next change of what its owner's
// mutex guards; the mutex is held for both methods. The zero broadcast is
// ready to use.
type broadcast struct{ ch chan struct{} }

// next returns a channel that the following wake closes.
func (b *broadcast) next() <-chan struct{} {
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// wake closes the channel next returned, if any.
func (b *broadcast) wake() {
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
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
