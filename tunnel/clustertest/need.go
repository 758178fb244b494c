// Package clustertest finds the real local clusters that tests run against:
// the single-node Kubernetes of testdata/cluster and the Docker Swarm of
// testdata/swarm. Their up scripts write an env file this package reads.
//
// When a cluster is missing, a test fails if CI=true (CI must never pass by
// skipping) and is skipped otherwise, with the command that starts it.
package clustertest

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// EnvDir is where the harness scripts write their env files, unless
// PLUG_TEST_ENV_DIR says otherwise.
const EnvDir = "/run/plug-test"

func envDir() string {
	if d := os.Getenv("PLUG_TEST_ENV_DIR"); d != "" {
		return d
	}
	return EnvDir
}

// missing stops t because a cluster it needs is not running.
func missing(t testing.TB, what, startCommand string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not running (%v); CI must start it with %s", what, err, startCommand)
	}
	t.Skipf("%s is not running (%v); start it with %s", what, err, startCommand)
}

// readEnv reads a KEY=VALUE file written by a harness script.
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := make(map[string]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			env[k] = strings.Trim(v, `"'`)
		}
	}
	return env, sc.Err()
}
