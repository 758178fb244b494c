package tunnel

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckBindingRefusesWhatNoPlatformCanServe(t *testing.T) {
	binding := func(name string, port, target int) Binding {
		return Binding{Name: name, Port: port, Target: target, Holder: Holder{Run: "run-1", Developer: "SHA256:dev"}}
	}
	cases := []struct {
		b    Binding
		want string
	}{
		{binding("Web", 80, 2000), "not a valid cluster name"},
		{binding("9web", 80, 2000), "starting with a letter"},
		{binding("web-", 80, 2000), "ending with a letter or digit"},
		{binding(strings.Repeat("a", 64), 80, 2000), "1 to 63"},
		{binding("web", 0, 2000), "-s web:8080:3000"},
		{binding("web", 70000, 2000), "1 to 65535"},
		{binding("web", 80, 0), "agent's port"},
		{Binding{Name: "web", Port: 80, Target: 2000}, "no id"},
		{Binding{Name: "web", Port: 80, Target: 2000, Holder: Holder{Run: "run-1"}}, "no key"},
	}
	for _, tc := range cases {
		err := CheckBinding(tc.b)
		var r *RefusedError
		if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckBinding(%q:%d:%d) = %v, want a RefusedError saying %q", tc.b.Name, tc.b.Port, tc.b.Target, err, tc.want)
		}
	}
	if err := CheckBinding(binding("web-1", 8080, 40000)); err != nil {
		t.Errorf("a valid binding was refused: %v", err)
	}
}
