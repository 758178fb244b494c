package cli

import (
	"errors"
	"strings"
	"testing"
)

func TestParseServe(t *testing.T) {
	good := map[string]Serve{
		"web:8080:3000":                  {Name: "web", ClusterPort: 8080, LocalPort: 3000},
		"a:1:65535":                      {Name: "a", ClusterPort: 1, LocalPort: 65535},
		"prod/web-2:80:3000":             {Profile: "prod", Name: "web-2", ClusterPort: 80, LocalPort: 3000},
		"gw.example.com/x:1:2":           {Profile: "gw.example.com", Name: "x", ClusterPort: 1, LocalPort: 2},
		strings.Repeat("a", 63) + ":1:1": {Name: strings.Repeat("a", 63), ClusterPort: 1, LocalPort: 1},
	}
	for in, want := range good {
		got, err := ParseServe(in)
		if err != nil || got != want {
			t.Errorf("ParseServe(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v prints as %q, want %q", got, got.String(), in)
		}
	}
	if got, err := ParseServe("prod/web:80:3000/tcp"); err != nil || got != (Serve{Profile: "prod", Name: "web", ClusterPort: 80, LocalPort: 3000}) {
		t.Errorf("ParseServe with /tcp = %+v, %v", got, err)
	}
	if got, err := ParseServe("stats:8125:9125/udp"); err != nil || got != (Serve{Name: "stats", ClusterPort: 8125, LocalPort: 9125, UDP: true}) || got.String() != "stats:8125:9125/udp" {
		t.Errorf("ParseServe with /udp = %+v, %v", got, err)
	}
	bad := map[string]string{
		"":                               "1 part",
		":80:3000":                       "NAME is empty",
		"web":                            "1 part",
		"web:80":                         "2 part",
		"web:80:3000:1":                  "4 part",
		"stats:8125:8125/udp/tcp":        "contains ':'",
		"web:0:3000":                     "CLUSTERPORT 0 is not between 1 and 65535",
		"web:80:65536":                   "LOCALPORT 65536 is not between 1 and 65535",
		"web:80:x":                       `LOCALPORT "x" is not a number`,
		"web::3000":                      `CLUSTERPORT "" is not a number`,
		"web:+80:3000":                   "not a number",
		"web:-1:3000":                    "not a number",
		"Web:80:3000":                    "does not start with a lowercase letter",
		"1web:80:3000":                   "does not start with a lowercase letter",
		"web-:80:3000":                   "ends with '-'",
		"we_b:80:3000":                   `contains '_'`,
		"web.shop:80:3000":               `contains '.'`,
		strings.Repeat("a", 64) + ":1:1": "64 characters long",
		"/web:80:3000":                   "profile name",
		"a/b/web:80:3000":                "contains '/'",
	}
	for in, reason := range bad {
		_, err := ParseServe(in)
		var se *ServeError
		if !errors.As(err, &se) {
			t.Errorf("ParseServe(%q) = %v, want a *ServeError", in, err)
			continue
		}
		if !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), "e.g. -s web:8080:3000") {
			t.Errorf("ParseServe(%q) says %q; want it to say %q, the form and an example", in, err, reason)
		}
	}
}

func FuzzParseServe(f *testing.F) {
	for _, s := range []string{"web:8080:3000", "prod/web:80:1", "web:0:1", "Web:1:1", "a/b:c:d", ":::", "x:65535:65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseServe(in)
		if err != nil {
			if !strings.Contains(err.Error(), ServeForm) {
				t.Fatalf("error %q lacks the accepted form", err)
			}
			return
		}
		if checkLabel(s.Name) != nil || s.ClusterPort < 1 || s.ClusterPort > 65535 || s.LocalPort < 1 || s.LocalPort > 65535 {
			t.Fatalf("ParseServe(%q) accepted %+v", in, s)
		}
		again, err := ParseServe(s.String())
		if err != nil || again != s {
			t.Fatalf("%+v does not round-trip through %q: %+v %v", s, s.String(), again, err)
		}
	})
}
