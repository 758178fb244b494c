package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// A --dockerrun run starts CMD (IMAGE [ARGS...]) in a local Docker
// container through the local docker CLI, as
//
//	docker run --rm -i [-t] --name plug-RUN --label plug.run=RUN \
//	    --network host --add-host NAME:ADDR... -- IMAGE [ARGS...]
//
// --network host puts the container in this machine's network: it reaches
// the loopback addresses the run listens on for the cluster's names, which
// each --add-host names (every name form, as CMD's hosts file has them when
// the container starts), and what it listens on is this machine's
// LOCALPORT, which -s forwards the cluster's callers to. That needs the
// engine to run on this machine (Linux); Docker Desktop's engine runs in a
// VM whose loopback is not this machine's, so --dockerrun is refused there.
// On Ctrl-C (or when the run ends) plug stops the container (docker stop,
// 10 s, then killed), and once docker run returned it removes it if it is
// still there (docker rm -f): nothing is left behind but the image.

// dockerStopWait is how long docker stop waits before killing the container.
const dockerStopWait = 10 * time.Second

// dockerRun is the container of a --dockerrun run.
type dockerRun struct {
	docker string // the docker CLI
	name   string // the container's name, plug-RUN
	image  []string
}

// checkDockerrun refuses --dockerrun where it cannot work. It contacts
// nothing.
func checkDockerrun(cmd []string, withEnv bool) error {
	switch {
	case runtime.GOOS != "linux":
		return fmt.Errorf("--dockerrun works on Linux only: the container shares this machine's network to reach the run's names, and a Docker engine on %s runs containers in a VM whose loopback is not this machine's", runtime.GOOS)
	case withEnv:
		return errors.New("--dockerrun does not take --env or --env-from in this version: the container gets the variables of its image")
	case len(cmd) == 0:
		return errors.New("--dockerrun needs an image to run: plug -p PROFILE -s api:8080:3000 --dockerrun -- IMAGE [ARGS...]")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("--dockerrun runs the local docker CLI, which is not on PATH (%v)", err)
	}
	return nil
}

// newDockerRun is the container of run id for image and its arguments.
func newDockerRun(id string, image []string) (*dockerRun, error) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		return nil, fmt.Errorf("cannot run docker: %v", err)
	}
	return &dockerRun{docker: docker, name: "plug-" + id, image: image}, nil
}

// argv is the docker run command line, with hosts (NAME:ADDR) as the
// container's names.
// A terminal on stdin gets one in the container too (-t).
func (d *dockerRun) argv(hosts []string, stdin *os.File) []string {
	argv := []string{d.docker, "run", "--rm", "-i", "--name", d.name, "--label", "plug.run=" + d.name[len("plug-"):], "--network", "host"}
	if info, err := stdin.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
		argv = append(argv, "-t")
	}
	for _, h := range hosts {
		argv = append(argv, "--add-host", h)
	}
	argv = append(argv, "--")
	return append(argv, d.image...)
}

// stop stops the container; docker run then returns with its exit code.
func (d *dockerRun) stop() {
	exec.Command(d.docker, "stop", "-t", fmt.Sprint(int(dockerStopWait/time.Second)), d.name).Run()
}

// remove removes the container if it is still there (docker run was
// killed before it could).
func (d *dockerRun) remove() {
	exec.Command(d.docker, "rm", "-f", d.name).Run()
}
