package swarmapi

import (
	"bytes"
	"encoding/json"
)

// RawSpec is a service spec as the engine sent it, decoded into maps:
// changing a field through it keeps every other field exactly as it was,
// including those this package does not know.
type RawSpec map[string]any

// Get returns the value at path (e.g. "TaskTemplate", "Placement") as JSON,
// and whether it is there.
func (s RawSpec) Get(path ...string) (json.RawMessage, bool) {
	var v any = map[string]any(s)
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	b, err := json.Marshal(v)
	return b, err == nil
}

// Set puts the JSON value at path, creating the objects on the way.
func (s RawSpec) Set(value json.RawMessage, path ...string) error {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	s.parent(path, true)[path[len(path)-1]] = v
	return nil
}

// Delete removes the value at path, if it is there; nothing else changes.
func (s RawSpec) Delete(path ...string) {
	if m := s.parent(path, false); m != nil {
		delete(m, path[len(path)-1])
	}
}

// SetLabel sets the service label key.
func (s RawSpec) SetLabel(key, value string) {
	s.parent([]string{"Labels", key}, true)[key] = value
}

// Label returns the service label key.
func (s RawSpec) Label(key string) string {
	labels, _ := s["Labels"].(map[string]any)
	v, _ := labels[key].(string)
	return v
}

// DeleteLabel removes the service label key.
func (s RawSpec) DeleteLabel(key string) {
	s.Delete("Labels", key)
}

// parent returns the object holding the last element of path. With create
// it makes the objects on the way (replacing anything that is not an
// object); without, it returns nil when one is missing.
func (s RawSpec) parent(path []string, create bool) map[string]any {
	m := map[string]any(s)
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			if !create {
				return nil
			}
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}
