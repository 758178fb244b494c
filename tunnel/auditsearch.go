package tunnel

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// maxAuditAnswer bounds the events of one answer to an audit search: the
// newest are kept.
const maxAuditAnswer = 5000

// AuditQuery is a search of the audit trail. Every field set must match;
// an empty query finds everything.
type AuditQuery struct {
	// Name is a name served: a run matches when it served it.
	Name string `json:"name,omitempty"`
	// User is a part of the account's name, in any case.
	User string `json:"user,omitempty"`
	// Key is a key's fingerprint, or its beginning.
	Key string `json:"key,omitempty"`
	// Since and Until bound the time: a run matches when it lasted into
	// the range, another event when it happened in it.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
}

// Select returns the events of trail (oldest first) that q finds: every
// event of each run that matches (its opening, names and end, so that it
// reads whole), and each other event that matches, oldest first, at most
// maxAuditAnswer (the newest).
func (q AuditQuery) Select(trail []AuditEvent) []AuditEvent {
	type span struct {
		first, last time.Time
		ended       bool
		user, key   string
		names       []string
	}
	runs := map[string]*span{}
	for _, e := range trail {
		if e.Run == "" {
			continue
		}
		s := runs[e.Run+" "+e.Key]
		if s == nil {
			s = &span{first: e.Time}
			runs[e.Run+" "+e.Key] = s
		}
		s.last = e.Time
		s.user, s.key = cmp.Or(s.user, e.User), cmp.Or(s.key, e.Key)
		if e.Name != "" {
			s.names = append(s.names, e.Name)
		}
		for _, n := range e.Names {
			name, _, _ := strings.Cut(n, ":")
			s.names = append(s.names, name)
		}
		if e.Event == AuditRunEnded {
			s.ended = true
		}
	}
	var out []AuditEvent
	for _, e := range trail {
		if e.Run == "" {
			if q.Name == "" && q.who(e.User, e.Key) && q.during(e.Time, e.Time) {
				out = append(out, e)
			}
			continue
		}
		s := runs[e.Run+" "+e.Key]
		last := s.last
		if !s.ended {
			last = time.Now()
		}
		if q.who(s.user, s.key) && q.during(s.first, last) && (q.Name == "" || slices.Contains(s.names, q.Name)) {
			out = append(out, e)
		}
	}
	return out[max(0, len(out)-maxAuditAnswer):]
}

// who says whether an account and key match q.
func (q AuditQuery) who(user, key string) bool {
	return strings.Contains(strings.ToLower(user), strings.ToLower(q.User)) && strings.HasPrefix(key, q.Key)
}

// during says whether [from, to] meets q's time range.
func (q AuditQuery) during(from, to time.Time) bool {
	return (q.Since.IsZero() || !to.Before(q.Since)) && (q.Until.IsZero() || !from.After(q.Until))
}
