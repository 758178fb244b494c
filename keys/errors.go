package keys

import (
	"fmt"
	"strings"
)

// NotFoundError says a profile does not exist, and which ones do.
type NotFoundError struct {
	Name  string
	Known []string // the existing profiles, sorted
}

func (e *NotFoundError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("no profile %q: there are no profiles yet", e.Name)
	}
	return fmt.Sprintf("no profile %q; the profiles are: %s", e.Name, strings.Join(e.Known, ", "))
}

// ExistsError says a file or profile is already there and was left alone.
type ExistsError struct {
	What string // "profile", "key pair"
	Name string
	Path string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%s %q already exists (%s)", e.What, e.Name, e.Path)
}

// NoKeyError says a profile has no key pair yet.
type NoKeyError struct {
	Name string
	Path string // where the private key was expected
}

func (e *NoKeyError) Error() string {
	return fmt.Sprintf("profile %q has no key pair yet (no %s)", e.Name, e.Path)
}

// HostKeyChangedError says a profile already pins a different host key.
// The pinned key was kept.
type HostKeyChangedError struct {
	Name   string
	Pinned string // fingerprint of the key the profile pins
	Given  string // fingerprint of the key that was offered
}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("profile %q pins the agent host key %s, not %s; the pinned key was kept", e.Name, e.Pinned, e.Given)
}

// ProfileError says a profile's content is not usable.
type ProfileError struct {
	Name   string
	Path   string
	Reason string
}

func (e *ProfileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("profile %q: %s", e.Name, e.Reason)
	}
	return fmt.Sprintf("profile %q (%s): %s", e.Name, e.Path, e.Reason)
}
