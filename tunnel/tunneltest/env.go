package tunneltest

import "plug/tunnel"

// EnvVars is e's variables as a map, NAME to VALUE, for tests of
// platforms' environments to compare.
func EnvVars(e *tunnel.Env) map[string]string {
	m := make(map[string]string, len(e.Vars))
	for _, v := range e.Vars {
		m[v.Name] = v.Value
	}
	return m
}
