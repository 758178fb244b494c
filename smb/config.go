package smb

import (
	"errors"
	"fmt"
	"strings"
)

// Config is what a Server serves and to whom.
type Config struct {
	// Share is the share's name, as in \\host\Share: 1 to 80 letters,
	// digits, '-', '_' or '.'; not IPC$.
	Share string
	// Dir is the directory served.
	Dir string
	// User and Password are the one credential accepted (NTLMv2). Both
	// must be set. They are never logged.
	User, Password string
	// Name is the server's NetBIOS name in its NTLM challenge; default
	// "PLUG".
	Name string
	// AllowUnsigned lets a client that does not ask for signing run an
	// unsigned session. By default every session is signed.
	AllowUnsigned bool
	// MaxConns caps the connections logged in at once; default 32. (Those
	// not yet logged in have a cap of their own, 8: see the package
	// documentation.)
	MaxConns int
	// Logf receives one line per session and per refused logon (never a
	// file's name or contents); nil discards them.
	Logf func(format string, args ...any)
}

// ErrUnsupported is returned by New where the server cannot run.
var ErrUnsupported = errors.New("the SMB server runs on Linux only")

// check validates the parts of c that do not touch the file system.
func (c *Config) check() error {
	if err := ValidShareName(c.Share); err != nil {
		return err
	}
	if c.User == "" || c.Password == "" {
		return errors.New("a user name and a password are required")
	}
	if strings.ContainsAny(c.User, `\/@"[]:|<>+=;,?*`) {
		return fmt.Errorf("the user name %q holds a character user names cannot have", c.User)
	}
	return nil
}

// ValidShareName reports what is wrong with name as a share name.
func ValidShareName(name string) error {
	if name == "" || len(name) > 80 {
		return fmt.Errorf("share name %q: give 1 to 80 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("share name %q: use only letters, digits, '-', '_' and '.'", name)
		}
	}
	if strings.EqualFold(name, "IPC$") {
		return fmt.Errorf("share name %q is reserved", name)
	}
	return nil
}
