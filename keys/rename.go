package keys

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// renameFile is os.Rename; tests replace it to make a move fail.
var renameFile = os.Rename

// Rename renames profile old to new with its key pair. It refuses with an
// *ExistsError when anything of new is already there, and changes nothing
// then. A failure part way moves back what was moved, so the profile stays
// whole under its old name.
func (s Store) Rename(old, new string) error {
	if err := ValidName(new); err != nil {
		return err
	}
	if _, err := s.Profile(old); err != nil {
		return err
	}
	if old == new {
		return nil
	}
	names, err := s.Names()
	if err != nil {
		return err
	}
	if other := sameFold(names, new); other != "" && other != old {
		return &ExistsError{What: "profile", Name: other, Path: s.ProfilePath(other)}
	}
	type move struct{ from, to string }
	// The profile moves last: until it does, the old name is complete.
	moves := []move{
		{s.KeyPath(old), s.KeyPath(new)},
		{s.KeyPath(old) + ".pub", s.KeyPath(new) + ".pub"},
		{s.ProfilePath(old), s.ProfilePath(new)},
	}
	caseOnly := strings.EqualFold(old, new)
	for _, m := range moves {
		if !caseOnly && exists(m.to) {
			what := "profile"
			if m.to != s.ProfilePath(new) {
				what = "key pair"
			}
			return &ExistsError{What: what, Name: new, Path: m.to}
		}
	}
	var done []move
	for _, m := range moves {
		if !exists(m.from) {
			continue
		}
		if err := renameFile(m.from, m.to); err != nil {
			for i := len(done) - 1; i >= 0; i-- {
				if rerr := renameFile(done[i].to, done[i].from); rerr != nil {
					err = errors.Join(err, fmt.Errorf("moving %s back to %s: %w", done[i].to, done[i].from, rerr))
				}
			}
			return fmt.Errorf("renaming profile %q to %q: %w", old, new, err)
		}
		done = append(done, m)
	}
	return nil
}
