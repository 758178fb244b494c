package swarmapitest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// filters is the engine's filters argument: values by key.
type filters map[string][]string

// parseFilters reads a filters argument, in the form {"key":["value"]} or
// the older {"key":{"value":true}}.
func parseFilters(s string) (filters, *apiError) {
	f := filters{}
	if s == "" {
		return f, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, errorf(http.StatusBadRequest, "invalid filter: %v", err)
	}
	for k, v := range raw {
		var list []string
		if json.Unmarshal(v, &list) != nil {
			var set map[string]bool
			if err := json.Unmarshal(v, &set); err != nil {
				return nil, errorf(http.StatusBadRequest, "invalid filter %q: %v", k, err)
			}
			for value := range set {
				list = append(list, value)
			}
		}
		f[k] = list
	}
	return f, nil
}

// match reports whether the filter has no key, or one of its values
// satisfies ok.
func (f filters) match(key string, ok func(string) bool) bool {
	values, has := f[key]
	if !has {
		return true
	}
	for _, v := range values {
		if ok(v) {
			return true
		}
	}
	return false
}

func prefixOf(s string) func(string) bool {
	return func(v string) bool { return strings.HasPrefix(s, v) }
}

func equal(s string) func(string) bool {
	return func(v string) bool { return v == s }
}

// labelsMatch matches a label filter value, "key" or "key=value".
func labelsMatch(labels map[string]string) func(string) bool {
	return func(v string) bool {
		k, want, withValue := strings.Cut(v, "=")
		have, ok := labels[k]
		return ok && (!withValue || have == want)
	}
}
