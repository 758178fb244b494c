package keys

import "fmt"

// MaxNameLen is the longest profile name accepted.
const MaxNameLen = 64

// NameForm describes the accepted profile names, for error messages.
const NameForm = "1 to 64 letters, digits, '.', '-' or '_', starting with a letter or digit (a host name such as gw.example.com is fine)"

// NameError says why a profile name is refused.
type NameError struct {
	Name   string
	Reason string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("profile name %q %s; a profile name is %s", e.Name, e.Reason, NameForm)
}

// ValidName returns a *NameError when name cannot be a profile name. Names
// are file names under ~/.plug and appear in `-s PROFILE/NAME:...`, so '/',
// ':' and leading dots are refused.
func ValidName(name string) error {
	switch {
	case name == "":
		return &NameError{name, "is empty"}
	case len(name) > MaxNameLen:
		return &NameError{name, fmt.Sprintf("is %d characters long", len(name))}
	case !isAlnum(name[0]):
		return &NameError{name, fmt.Sprintf("starts with %q", name[0])}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return &NameError{name, fmt.Sprintf("contains %q", c)}
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
