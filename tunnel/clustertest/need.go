// Package clustertest finds the real local clusters that tests run against:
// the single-node Kubernetes of testdata/cluster and the Docker Swarm of
// testdata/swarm. Their up scripts write an env file this package reads.
//
// When a cluster is missing, a test fails if CI=true (CI must never pass by
// skipping) and is skipped otherwise, with the command that starts it;
// Unavailable does the same for anything else a test needs.
//
// Every test of the module, with a cluster or without, waits with
// Eventually, Until and Consistently: for a condition, with a deadline.
// TCPPair gives tests a loopback connection's two ends.
package clustertest

import (
	"bufio"
	"errors"
	"fmt"
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
	Unavailable(t, fmt.Sprintf("%s is not running (%v); start it with %s", what, err, startCommand))
}

// Unavailable stops t because something it needs is missing here (a tool,
// root, an image): it fails t when CI=true, where every test must run, and
// skips it otherwise. why says what is missing and how to get it.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: every test must run)", why)
	}
	t.Skipf("%s", why)
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

// plugImage is the image of plug the tests deploy: PLUG_TEST_IMAGE when set
// (an image a developer imported under a tag of their own, so that several
// checkouts can test against one cluster), else the PLUG_IMAGE up.sh loaded.
func plugImage(env map[string]string) string {
	if v := os.Getenv("PLUG_TEST_IMAGE"); v != "" {
		return v
	}
	return env["PLUG_IMAGE"]
}

// workloadImage is testdata/workload's image: PLUG_TEST_WORKLOAD_IMAGE when
// set (one built from a changed testdata/workload and imported under a tag
// of its own), else the WORKLOAD_IMAGE up.sh loaded.
func workloadImage(env map[string]string) string {
	if v := os.Getenv("PLUG_TEST_WORKLOAD_IMAGE"); v != "" {
		return v
	}
	return env["WORKLOAD_IMAGE"]
}

// needPlugImage is image, or stops the test like a missing cluster (the
// test "cluster" or "swarm", started with up) when it is empty.
func needPlugImage(t testing.TB, image, cluster, up string) string {
	t.Helper()
	if image == "" {
		env := map[string]string{"cluster": "kube.env", "swarm": "swarm.env"}[cluster]
		missing(t, "plug's image in the test "+cluster, "./build.sh image && "+up, errors.New(env+" names no PLUG_IMAGE"))
	}
	return image
}
