package kubeplatform

import "testing"

func TestExpandRefs(t *testing.T) {
	vars := map[string]string{"A": "a", "B": "b", "EMPTY": "", "DOLLAR": "$(A)"}
	lookup := func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"$(A)", "a"},
		{"$(A)$(B)", "ab"},
		{"x-$(A)-y", "x-a-y"},
		{"$(EMPTY)", ""},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$(A)$(UNDEFINED)$(B)", "a$(UNDEFINED)b"},
		{"$(DOLLAR)", "$(A)"}, // a value is expanded once, not again
		{"$$(A)", "$(A)"},
		{"$$$(A)", "$a"},
		{"$$$$", "$$"},
		{"$$", "$"},
		{"$", "$"},
		{"a$", "a$"},
		{"$a", "$a"},
		{"$ $", "$ $"},
		{"$(A", "$(A"},
		{"$(A $(B)", "$(A $(B)"}, // the first ')' closes "A $(B"
		{"$($(A))", "$($(A))"},
		{"$()", "$()"},
		{"$(A))", "a)"},
		{"$é$(A)", "$éa"},
		{"$\xff$(A)", "$\uFFFDa"},
		{"ü$(A)ü", "üaü"},
	} {
		if got := expandRefs(tc.in, lookup); got != tc.want {
			t.Errorf("expandRefs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
