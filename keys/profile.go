package keys

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Profile is how to reach one cluster's agent.
type Profile struct {
	Name     string `json:"-"` // the file name; not stored inside
	Host     string `json:"host"`
	Port     int    `json:"port"`
	User     string `json:"user,omitempty"`     // SSH user; empty means the local user name
	HostKey  string `json:"host_key"`           // the agent's host key, authorized_keys form
	Platform string `json:"platform,omitempty"` // a hint: "kubernetes", "swarm", "gateway"
}

// Addr is the agent's address, host:port.
func (p Profile) Addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// PinnedKey parses the pinned host key.
func (p Profile) PinnedKey() (ssh.PublicKey, error) {
	key, err := ParseHostKey(p.HostKey)
	if err != nil {
		return nil, &ProfileError{Name: p.Name, Reason: err.Error()}
	}
	return key, nil
}

// ParseHostKey parses one public key in authorized_keys form
// ("ssh-ed25519 AAAA... [comment]"), the form `ssh-keyscan` and the agent's
// installer print.
func ParseHostKey(line string) (ssh.PublicKey, error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, errors.New("no host key given; it looks like 'ssh-ed25519 AAAA...'")
	}
	key, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("host key %q is not a public key in authorized_keys form ('ssh-ed25519 AAAA...'): %v", abbreviate(line), err)
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("give exactly one host key, 'ssh-ed25519 AAAA...'")
	}
	return key, nil
}

// Check returns a *ProfileError when p cannot be used to reach an agent.
func (p Profile) Check() error {
	bad := func(reason string) error { return &ProfileError{Name: p.Name, Reason: reason} }
	if err := ValidName(p.Name); err != nil {
		return err
	}
	switch {
	case p.Host == "" || strings.ContainsAny(p.Host, " \t/"):
		return bad(fmt.Sprintf("host %q is not a host name or address", p.Host))
	case p.Port < 1 || p.Port > 65535:
		return bad(fmt.Sprintf("port %d is not between 1 and 65535", p.Port))
	case strings.ContainsAny(p.User, " \t:@"):
		return bad(fmt.Sprintf("user %q contains a space, ':' or '@'", p.User))
	}
	_, err := p.PinnedKey()
	return err
}

// Profile reads the profile name. A profile that does not exist gives a
// *NotFoundError listing those that do.
func (s Store) Profile(name string) (Profile, error) {
	if err := ValidName(name); err != nil {
		return Profile{}, err
	}
	path := s.ProfilePath(name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		known, lerr := s.Names()
		if lerr != nil {
			return Profile{}, lerr
		}
		return Profile{}, &NotFoundError{Name: name, Known: known}
	}
	if err != nil {
		return Profile{}, err
	}
	p := Profile{Name: name}
	if err := json.Unmarshal(data, &p); err != nil {
		return Profile{}, &ProfileError{Name: name, Path: path, Reason: "not a plug profile: " + err.Error()}
	}
	if err := p.Check(); err != nil {
		var pe *ProfileError
		if errors.As(err, &pe) {
			pe.Path = path
		}
		return Profile{}, err
	}
	return p, nil
}

// Names lists the profiles, sorted. Files whose names are not profile
// names (temporary files, editor backups) are ignored.
func (s Store) Names() ([]string, error) {
	entries, err := os.ReadDir(s.profilesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && ValidName(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// AddProfile writes p. Re-adding a profile with the same host key updates
// it; a different host key is refused with a *HostKeyChangedError unless
// force is set. A new profile whose name differs from an existing one only
// by case is refused with an *ExistsError (they would be one file on macOS
// and Windows).
func (s Store) AddProfile(p Profile, force bool) error {
	if err := p.Check(); err != nil {
		return err
	}
	given, _ := p.PinnedKey()
	old, err := s.Profile(p.Name)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		if other := sameFold(nf.Known, p.Name); other != "" {
			return &ExistsError{What: "profile", Name: other, Path: s.ProfilePath(other)}
		}
	case err != nil && !force:
		return err
	case err == nil && !force:
		if pinned, _ := old.PinnedKey(); string(pinned.Marshal()) != string(given.Marshal()) {
			return &HostKeyChangedError{Name: p.Name, Pinned: Fingerprint(pinned), Given: Fingerprint(given)}
		}
	}
	p.HostKey = AuthorizedKey(given)
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := s.ensureDirs(s.profilesDir()); err != nil {
		return err
	}
	return writeFile(s.ProfilePath(p.Name), append(data, '\n'), 0o600)
}

// sameFold returns the name among names equal to name under case folding
// but spelled differently, or "".
func sameFold(names []string, name string) string {
	for _, n := range names {
		if n != name && strings.EqualFold(n, name) {
			return n
		}
	}
	return ""
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}
