//go:build !unix

package tunnel

// openFileLimit is 0, unknown: this system has no limit of open files the
// agent sizes its caps to.
func openFileLimit() uint64 { return 0 }
