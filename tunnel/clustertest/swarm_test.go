package clustertest

import (
	"os"
	"strings"
	"testing"
)

// stopped runs need with a stopRecorder, with no env files and CI set to ci,
// and tells how need stopped.
func stopped(t *testing.T, ci string, need func(testing.TB)) *stopRecorder {
	t.Setenv("PLUG_TEST_ENV_DIR", t.TempDir())
	t.Setenv("CI", ci)
	return recorded(t, need)
}

func TestNeedSwarmWithoutSwarmSkipsOrFailsInCI(t *testing.T) {
	need := func(t testing.TB) { NeedSwarm(t) }
	if r := stopped(t, "", need); !r.skipped {
		t.Errorf("without CI, NeedSwarm did not skip (failed=%v)", r.failed)
	}
	if r := stopped(t, "true", need); !r.failed {
		t.Errorf("with CI=true, NeedSwarm did not fail (skipped=%v)", r.skipped)
	}
}

func TestNeedSwarmGivesTheNetworkImagesAndSocket(t *testing.T) {
	s := NeedSwarm(t)
	if got := s.Docker(t, "network", "inspect", "--format", "{{.Driver}} {{.Scope}} {{.Attachable}}", s.Network); got != "overlay swarm true" {
		t.Errorf("network %s is %q, want an attachable swarm overlay (overlay swarm true)", s.Network, got)
	}
	s.Docker(t, "image", "inspect", s.WorkloadImage)
	if st, err := os.Stat(s.Socket); err != nil {
		t.Error(err)
	} else if st.Mode()&os.ModeSocket == 0 {
		t.Errorf("%s is not a socket (mode %v)", s.Socket, st.Mode())
	}
}

func TestNeedSwarmRemovesWhatTheTestCreated(t *testing.T) {
	var prefix string
	t.Run("creates", func(t *testing.T) {
		s := NeedSwarm(t)
		prefix = s.Prefix
		s.Docker(t, "network", "create", "--driver", "overlay", "--attachable", prefix+"-net")
		s.Docker(t, "service", "create", "--detach", "--quiet", "--no-resolve-image", "--name", prefix+"-svc",
			"--network", prefix+"-net", s.WorkloadImage, "serve", ":8080")
		s.Docker(t, "run", "--detach", "--name", prefix+"-ctr", "--network", s.Network, s.WorkloadImage, "serve", ":8080")
	})
	if prefix == "" {
		return // skipped: no swarm
	}
	s := NeedSwarm(t)
	for _, list := range [][]string{
		{"service", "ls", "--format", "{{.Name}}"},
		{"ps", "--all", "--format", "{{.Names}}"},
		{"network", "ls", "--format", "{{.Name}}"},
	} {
		for _, name := range strings.Fields(s.Docker(t, list...)) {
			if strings.HasPrefix(name, prefix) {
				t.Errorf("%s is still there after its test ended (docker %s)", name, strings.Join(list, " "))
			}
		}
	}
}
