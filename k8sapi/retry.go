package k8sapi

import (
	"context"
	"time"
)

// RetryOnConflict calls attempt until it returns something other than a
// Conflict, at most 8 times, waiting a little longer each time. attempt
// must read the object afresh and base its write on that read: a Conflict
// means another writer changed the object in between.
func RetryOnConflict(ctx context.Context, attempt func() error) error {
	wait := 10 * time.Millisecond
	var err error
	for i := 0; i < 8; i++ {
		if err = attempt(); !IsConflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
	return err
}
