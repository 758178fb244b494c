package tunnel

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"regexp"
	"slices"
	"strings"
)

// A Filter makes a takeover personal (plug -s ... --header/--path): only
// the HTTP requests it matches reach the run; every other request to the
// name, and every connection that is not cleartext HTTP, goes to the
// deployed service (DeployedDialer). The zero Filter matches everything: a
// full takeover.
//
// A request matches when every header condition holds for the first field
// of that name the request carries, and its path starts with Path. Two
// personal takeovers of one name may not overlap (Overlaps).
type Filter struct {
	Headers []HeaderMatch `json:"headers,omitempty"`
	// Path, when set, is a prefix of the request's path (before any '?'),
	// compared byte for byte: /api matches /api, /api/x and /apiary.
	Path string `json:"path,omitempty"`
}

// HeaderMatch is one header condition of a Filter: exactly Value, or the
// whole value matching Regex (Go's RE2 syntax, anchored at both ends).
type HeaderMatch struct {
	Name  string `json:"name"` // canonical form, e.g. X-Dev
	Value string `json:"value,omitempty"`
	Regex string `json:"regex,omitempty"`
}

// Caps of a Filter, checked by Check on both sides of the wire.
const (
	MaxFilterHeaders = 8   // header conditions of one filter
	maxFilterField   = 200 // bytes of a header name, value, regex or path (a Filter's String fits maxTextField)
)

// Empty reports whether f filters nothing (a full takeover).
func (f Filter) Empty() bool { return len(f.Headers) == 0 && f.Path == "" }

// String says f for a terminal: header X-Dev=alice, path /api.
func (f Filter) String() string {
	var parts []string
	for _, h := range f.Headers {
		parts = append(parts, "header "+h.String())
	}
	if f.Path != "" {
		parts = append(parts, "path "+f.Path)
	}
	return strings.Join(parts, ", ")
}

func (h HeaderMatch) String() string {
	if h.Regex != "" {
		return h.Name + "~" + h.Regex
	}
	return h.Name + "=" + h.Value
}

// ParseHeaderMatch parses NAME=VALUE (the exact value) or NAME~REGEX (the
// whole value matches REGEX), split at the first '=' or '~'.
func ParseHeaderMatch(s string) (HeaderMatch, error) {
	i := strings.IndexAny(s, "=~")
	if i <= 0 {
		return HeaderMatch{}, fmt.Errorf("--header %q: the form is NAME=VALUE (that exact value) or NAME~REGEX (the whole value matches REGEX), e.g. --header 'X-Dev=alice'", PeerText(s))
	}
	h := HeaderMatch{Name: textproto.CanonicalMIMEHeaderKey(s[:i])}
	if s[i] == '=' {
		h.Value = s[i+1:]
	} else {
		h.Regex = s[i+1:]
	}
	return h, h.check()
}

// Check refuses a filter the agent cannot apply, saying why: a header name
// that is not an HTTP token, a value that is not one, a regex that does
// not compile or is empty, a path that does not start with '/', or more
// than the caps allow.
func (f Filter) Check() error {
	if len(f.Headers) > MaxFilterHeaders {
		return fmt.Errorf("at most %d --header conditions a run (given %d)", MaxFilterHeaders, len(f.Headers))
	}
	seen := map[string]bool{}
	for _, h := range f.Headers {
		if err := h.check(); err != nil {
			return err
		}
		if seen[h.Name] {
			return fmt.Errorf("two --header conditions on %s; one condition a header (a regex can say several values: --header '%s~a|b')", h.Name, h.Name)
		}
		seen[h.Name] = true
	}
	if f.Path != "" {
		if !strings.HasPrefix(f.Path, "/") || len(f.Path) > maxFilterField || strings.ContainsAny(f.Path, "?# \t") || hasControl(f.Path) {
			return fmt.Errorf("--path %q: a path prefix starts with '/', has no '?', '#' or spaces, and is at most %d bytes, e.g. --path /api/", PeerText(f.Path), maxFilterField)
		}
	}
	return nil
}

func (h HeaderMatch) check() error {
	if h.Name == "" || len(h.Name) > maxFilterField || strings.IndexFunc(h.Name, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return fmt.Errorf("--header %q: the header name is not an HTTP field name (letters, digits and !#$%%&'*+-.^_`|~, at most %d)", PeerText(h.Name), maxFilterField)
	}
	switch {
	case h.Value != "" && h.Regex != "":
		return fmt.Errorf("--header %s: an exact value or a regex, not both", PeerText(h.Name))
	case h.Regex != "":
		if len(h.Regex) > maxFilterField || hasControl(h.Regex) {
			return fmt.Errorf("--header %s~...: the regex is longer than %d bytes, or holds a control character (say \\t, \\x00 instead)", PeerText(h.Name), maxFilterField)
		}
		if _, err := regexp.Compile(h.Regex); err != nil {
			return fmt.Errorf("--header %s~%s: %v", PeerText(h.Name), PeerText(h.Regex), err)
		}
	default:
		if h.Value == "" || len(h.Value) > maxFilterField || hasControl(h.Value) {
			return fmt.Errorf("--header %s=%q: the value is empty, longer than %d bytes, or holds a control character; say the exact value, e.g. --header '%s=alice'", PeerText(h.Name), PeerText(h.Value), maxFilterField, PeerText(h.Name))
		}
	}
	return nil
}

// hasControl reports whether s holds a control character (tab aside,
// which a header value may hold).
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }) >= 0
}

// isTokenChar reports whether r may appear in an HTTP field name (RFC 9110
// token).
func isTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// matcher is a checked Filter, ready to match requests.
type matcher struct {
	filter  Filter
	regexps []*regexp.Regexp // per header; nil for an exact value
}

// compile checks f and makes its matcher.
func (f Filter) compile() (*matcher, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	m := &matcher{filter: f, regexps: make([]*regexp.Regexp, len(f.Headers))}
	for i, h := range f.Headers {
		if h.Regex != "" {
			m.regexps[i] = regexp.MustCompile(`^(?:` + h.Regex + `)$`)
		}
	}
	return m, nil
}

// match reports whether r is one of the filter's requests.
func (m *matcher) match(r *http.Request) bool {
	if m.filter.Path != "" && !strings.HasPrefix(r.URL.Path, m.filter.Path) {
		return false
	}
	for i, h := range m.filter.Headers {
		vs := r.Header[h.Name]
		if len(vs) == 0 {
			return false
		}
		if re := m.regexps[i]; re != nil {
			if !re.MatchString(vs[0]) {
				return false
			}
		} else if vs[0] != h.Value {
			return false
		}
	}
	return true
}

// Overlaps reports whether some request could match both f and g, erring
// towards yes: f and g are disjoint only when they name the same header
// with two different exact values, or with an exact value that the other's
// regex does not match, or when both have a path and neither path is a
// prefix of the other. Two regexes on one header, and conditions on
// different headers, overlap: a request may carry both.
func (f Filter) Overlaps(g Filter) bool {
	if f.Path != "" && g.Path != "" && !strings.HasPrefix(f.Path, g.Path) && !strings.HasPrefix(g.Path, f.Path) {
		return false
	}
	for _, a := range f.Headers {
		i := slices.IndexFunc(g.Headers, func(b HeaderMatch) bool { return b.Name == a.Name })
		if i < 0 {
			continue
		}
		if disjoint(a, g.Headers[i]) {
			return false
		}
	}
	return true
}

// disjoint reports whether no value matches both a and b (on one header).
func disjoint(a, b HeaderMatch) bool {
	switch {
	case a.Regex == "" && b.Regex == "":
		return a.Value != b.Value
	case a.Regex == "":
		return !fullMatch(b.Regex, a.Value)
	case b.Regex == "":
		return !fullMatch(a.Regex, b.Value)
	}
	return false
}

func fullMatch(expr, value string) bool {
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	return err == nil && re.MatchString(value)
}

// errNotFiltered is what an agent that routes by filter says of a filter on
// a name it cannot route by request: one it did not take over.
var errNotFiltered = errors.New("a personal takeover (--header, --path) needs a deployed Service of that name to send the other requests to; this name has none, so serve it without --header and --path")
