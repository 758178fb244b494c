package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SwarmUp is the command that starts the test Docker Swarm.
const SwarmUp = "sudo testdata/swarm/up.sh"

// Swarm is the running single-node Docker Swarm of testdata/swarm, as seen
// by one test.
type Swarm struct {
	Host      string // DOCKER_HOST of the engine: unix:///var/run/docker.sock
	Socket    string // path of the engine's API socket, taken from Host
	Network   string // the attachable overlay network services and containers join
	DockerBin string // the docker CLI matching the engine (API 1.41)

	PlugImage     string // plug's own image, empty when it was not built
	WorkloadImage string // testdata/workload's image (entrypoint /workload)

	// Prefix is unique to the test, a DNS label of at most 49 characters:
	// name what the test creates Prefix+"-something". Services, containers
	// networks and volumes whose names start with it are removed when the
	// test ends.
	Prefix string
}

// NeedSwarm returns the test swarm. When it is not running, the test fails
// if CI=true and is skipped otherwise, naming the command that starts it.
func NeedSwarm(t testing.TB) *Swarm {
	t.Helper()
	const what = "the test Docker Swarm"
	s, err := loadSwarm(filepath.Join(envDir(), "swarm.env"))
	if err == nil {
		err = s.checkActive()
	}
	if err != nil {
		missing(t, what, SwarmUp, err)
	}
	s.Prefix = namespaceFor(t.Name())
	t.Cleanup(func() {
		if err := s.removeCreated(); err != nil {
			t.Errorf("removing what %s created: %v", t.Name(), err)
		}
	})
	return s
}

// NeedPlugImage returns plug's image, stopping the test like a missing
// swarm when dist/plug-image.tar was not built before up.sh ran.
func (s *Swarm) NeedPlugImage(t testing.TB) string {
	t.Helper()
	return needPlugImage(t, s.PlugImage, "swarm", SwarmUp)
}

// loadSwarm reads the env file up.sh writes.
func loadSwarm(path string) (*Swarm, error) {
	env, err := readEnv(path)
	if err != nil {
		return nil, err
	}
	for _, key := range []string{"DOCKER_HOST", "DOCKER", "SWARM_NETWORK", "WORKLOAD_IMAGE"} {
		if env[key] == "" {
			return nil, fmt.Errorf("%s has no %s", path, key)
		}
	}
	return &Swarm{
		Host:          env["DOCKER_HOST"],
		Socket:        strings.TrimPrefix(env["DOCKER_HOST"], "unix://"),
		Network:       env["SWARM_NETWORK"],
		DockerBin:     env["DOCKER"],
		PlugImage:     plugImage(env),
		WorkloadImage: workloadImage(env),
	}, nil
}

// checkActive tells whether the engine answers and is a swarm manager.
func (s *Swarm) checkActive() error {
	state, err := s.TryDocker("info", "--format", "{{.Swarm.LocalNodeState}}")
	if err == nil && state != "active" {
		err = fmt.Errorf("the engine at %s is not in a swarm (state %q)", s.Host, state)
	}
	return err
}

// Docker runs the docker CLI against the test swarm and returns its standard
// output without the final newline. It fails the test if docker fails.
func (s *Swarm) Docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.TryDocker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dockerTimeout bounds every docker command, so a hung engine fails a test
// instead of stalling the suite.
const dockerTimeout = 2 * time.Minute

// TryDocker is Docker for a command that may fail: the error carries
// docker's standard error.
func (s *Swarm) TryDocker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.DockerBin, args...)
	cmd.Env = append(cmd.Environ(), "DOCKER_HOST="+s.Host)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "),
			errors.Join(err, ctx.Err()), strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSuffix(stdout.String(), "\n"), nil
}

// removeCreated removes the services, containers, networks and volumes named
// with the test's prefix, and waits until they are gone: the engine removes a
// service's tasks after the service, a network once no task uses it, and a
// volume once no container does.
func (s *Swarm) removeCreated() error {
	var left []string
	var refused error
	if poll(removeTimeout, func() error {
		left, refused = s.removeRound()
		if len(left) > 0 || refused != nil {
			return errNotYet
		}
		return nil
	}) != nil {
		return fmt.Errorf("still there after %v: %s (%w)", removeTimeout, strings.Join(left, " "), refused)
	}
	return nil
}

// removeTimeout bounds how long a test's end waits for what it created to go.
const removeTimeout = 60 * time.Second

// removeRound asks once for the removal of everything named with the
// prefix, and returns what it found. The error is the last refusal: one
// that repeats until the deadline explains what stayed.
func (s *Swarm) removeRound() (found []string, err error) {
	for _, kind := range []struct{ list, remove []string }{
		{[]string{"service", "ls", "--format", "{{.Name}}"}, []string{"service", "rm"}},
		{[]string{"ps", "--all", "--format", "{{.Names}}"}, []string{"rm", "--force"}},
		{[]string{"network", "ls", "--format", "{{.Name}}"}, []string{"network", "rm"}},
		{[]string{"volume", "ls", "--format", "{{.Name}}"}, []string{"volume", "rm"}},
	} {
		out, listErr := s.TryDocker(kind.list...)
		if listErr != nil {
			return found, listErr
		}
		var names []string
		for _, name := range strings.Fields(out) {
			if strings.HasPrefix(name, s.Prefix) {
				names = append(names, name)
			}
		}
		if len(names) > 0 {
			found = append(found, names...)
			if _, rmErr := s.TryDocker(append(kind.remove, names...)...); rmErr != nil {
				err = rmErr
			}
		}
	}
	return found, err
}
