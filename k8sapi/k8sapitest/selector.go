package k8sapitest

import (
	"net/url"
	"strings"
)

// requirement is one term of a label selector.
type requirement struct {
	key, value string
	op         string // "=", "!=", "exists", "!exists"
}

// selector is a parsed label selector; the empty one selects everything.
type selector []requirement

// parseSelector reads the equality-based label selector s: terms
// "k=v", "k==v", "k!=v", "k" and "!k", joined by commas. Set-based terms
// ("k in (a,b)") are refused.
func parseSelector(s string) (selector, *apiError) {
	var sel selector
	if strings.TrimSpace(s) == "" {
		return sel, nil
	}
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		var r requirement
		switch {
		case strings.Contains(term, "!="):
			r.key, r.value, _ = strings.Cut(term, "!=")
			r.op = "!="
		case strings.Contains(term, "=="):
			r.key, r.value, _ = strings.Cut(term, "==")
			r.op = "="
		case strings.Contains(term, "="):
			r.key, r.value, _ = strings.Cut(term, "=")
			r.op = "="
		case strings.HasPrefix(term, "!"):
			r.key, r.op = term[1:], "!exists"
		default:
			r.key, r.op = term, "exists"
		}
		r.key, r.value = strings.TrimSpace(r.key), strings.TrimSpace(r.value)
		if r.key == "" || strings.ContainsAny(r.key, " ()!=") || strings.ContainsAny(r.value, " ()!=") {
			return nil, badRequest("unable to parse requirement %q of the label selector %q (k8sapitest reads k=v, k==v, k!=v, k and !k)", term, s)
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// matches reports whether sel selects obj by its labels.
func (sel selector) matches(obj object) bool {
	labels := labelsOf(obj)
	for _, r := range sel {
		v, has := labels[r.key]
		switch r.op {
		case "=":
			if !has || v != r.value {
				return false
			}
		case "!=":
			if has && v == r.value {
				return false
			}
		case "exists":
			if !has {
				return false
			}
		case "!exists":
			if has {
				return false
			}
		}
	}
	return true
}

// listSelector reads the label selector of a list or watch query; field
// selectors are refused.
func listSelector(q url.Values) (selector, *apiError) {
	if fs := q.Get("fieldSelector"); fs != "" {
		return nil, badRequest("k8sapitest does not read field selectors (%q)", fs)
	}
	return parseSelector(q.Get("labelSelector"))
}
