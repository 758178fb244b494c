package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"plug/keys"
	"plug/tunnel"
)

// updateUsage is the usage of plug update.
const updateUsage = `Usage: plug update [-p PROFILE]
       plug update [-p PROFILE] --agent IMAGE [--wait DURATION]

Downloads the plug binary for this system from PROFILE's agent, gzipped
(its get user, over the host key the profile pins), unpacks it, checks the
SHA-256 of the binary against the SHA256SUMS the agent hands out, and
replaces the plug binary that runs this command with it: the new file is
written beside it and renamed over it, so the old one stays whole until the
new one is complete and checked. On Windows the running plug.exe is first
renamed to plug.exe.old (Windows does not let a running program be
replaced), which the next update removes.

When the digests differ, nothing is replaced: the download is removed and
update fails. The agent's version is the one the new plug has: runs, doctor
and who then speak to it with no version skew.

With --agent IMAGE, the agent is moved instead (this plug is left as it
is): the agent itself sets IMAGE on the agent's container of its own
Deployment, with its own rights in the cluster (the rule "get, patch
deployments.apps/plug" of its Role), so you need no cluster credentials,
only a key that oversees the agent (with admission by approval a member,
with open admission an admin the operator named). The agent then waits,
up to --wait (default 3m, between 10s and 15m), until every replica runs
IMAGE and is ready, telling each step here. A rollout that fails — the
image cannot be pulled (ImagePullBackOff, ErrImageNeverPull), the
container crashes, or the pods are not ready in time (an agent lacking a
right that runs need is never ready) — is undone: the previous image is set
back and waited for, and plug says what failed. While it waits, plug names
a new agent that refuses runs for a rule its Role lacks, with the kubectl
patch that grants it: once that is run, the agent serves and the rollout
ends. The Role is never changed: once the new agent answers, plug prints
each right it lacks with the one kubectl patch that grants that right
alone, as plug doctor does. The move
and its outcome are in the agent's audit trail (agent.update, then
agent.updated or agent.update_failed). On Swarm the agent sets IMAGE on
its own service, starting the new task before it stops for that update,
and sets the previous image back when the new task fails or does not run
in time (deploy/SWARM.md, The image); an agent publishing its port in host
mode is refused, saying how to update it by hand.

  --agent IMAGE    the image to move the agent to, e.g.
                   registry.example.com/plug:2.31.0
  --wait DURATION  how long the new pods may take to be ready (3m)

-p may be left out when there is one profile.

Exit codes: 0 updated (or already the agent's version); 1 it failed (the
binary is unchanged; with --agent, the previous image runs, or plug says
what to do); 2 bad usage.

Examples:
  plug update -p prod
  plug update -p prod --agent registry.example.com/plug:2.31.0 --wait 5m
`

// runUpdate is plug update.
func runUpdate(c *cli, args []string) error {
	fs := flags("update")
	image := fs.String("agent", "", "")
	wait := fs.Duration("wait", tunnel.DefaultUpdateWait, "")
	store, name, err := c.profileArgs("update", fs, args)
	if err != nil {
		return err
	}
	if flagSet(fs, "agent") {
		if err := tunnel.CheckImage(*image); err != nil {
			return usageError("update", "--agent: %v", err)
		}
		if *wait < tunnel.MinUpdateWait || *wait > tunnel.MaxUpdateWait {
			return usageError("update", "--wait %s: give a duration between %s and %s", *wait, tunnel.MinUpdateWait, tunnel.MaxUpdateWait)
		}
		return c.updateAgent(store, name, *image, *wait)
	} else if flagSet(fs, "wait") {
		return usageError("update", "--wait is for --agent IMAGE")
	}
	prof, err := store.Profile(name)
	if err != nil {
		return err
	}
	hostKey, err := prof.PinnedKey()
	if err != nil {
		return err
	}
	exe, err := runningBinary()
	if err != nil {
		return &exitCode{ExitFailed, err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := tunnel.ClientConfig{Addr: prof.Addr(), HostKey: hostKey, Profile: name}
	got, err := replaceBinary(ctx, cfg, exe)
	if err != nil {
		return &exitCode{ExitFailed, err}
	}
	fmt.Fprintf(c.stderr, "plug: %s is now plug %s from the agent of %s (was %s; SHA-256 %s, as the agent lists it)\n",
		exe, got.AgentVersion, name, tunnel.Version, got.Got)
	return nil
}

// runningBinary is the file of the plug that runs, its links resolved.
func runningBinary() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("cannot find the plug binary that runs: %v", err)
	}
	return exe, nil
}

// replaceBinary downloads the agent's plug for this system next to exe,
// and renames it over exe once its SHA-256 is the one the agent lists. On
// any failure exe is left as it was and the download removed.
func replaceBinary(ctx context.Context, cfg tunnel.ClientConfig, exe string) (tunnel.CLIDownload, error) {
	info, err := os.Stat(exe)
	if err != nil {
		return tunnel.CLIDownload{}, err
	}
	dir := filepath.Dir(exe)
	f, err := os.CreateTemp(dir, ".plug-update-*")
	if err != nil {
		return tunnel.CLIDownload{}, fmt.Errorf("cannot write beside %s (%v): run plug update as the user who may replace it", exe, err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			os.Remove(tmp)
		}
	}()
	got, err := tunnel.DownloadCLI(ctx, cfg, runtime.GOOS+"-"+runtime.GOARCH, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return got, fmt.Errorf("plug is unchanged: %w", err)
	case got.Listed != got.Got:
		return got, fmt.Errorf("plug is unchanged: the download from the agent at %s has SHA-256 %s, but the agent's SHA256SUMS lists %s; the copy was damaged or tampered with on the way, or the agent's image is broken", cfg.Addr, got.Got, got.Listed)
	}
	if err := os.Chmod(tmp, info.Mode().Perm()|0o111); err != nil {
		return got, fmt.Errorf("plug is unchanged: %v", err)
	}
	if err := renameOver(tmp, exe); err != nil {
		return got, fmt.Errorf("plug is unchanged: %v", err)
	}
	done = true
	return got, nil
}

// renameOver replaces exe by file new. Windows does not let a running
// program's file be replaced, but lets it be renamed: the running exe goes
// aside to exe.old first (the previous one there removed), and is put back
// if the new one cannot take its place.
func renameOver(new, exe string) error {
	if runtime.GOOS != "windows" {
		return os.Rename(new, exe)
	}
	old := exe + ".old"
	if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot remove %s, left by the previous update: %v", old, err)
	}
	if err := os.Rename(exe, old); err != nil {
		return err
	}
	if err := os.Rename(new, exe); err != nil {
		os.Rename(old, exe)
		return err
	}
	return nil
}

// flagSet reports whether flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// newAgentWait bounds how long plug waits, after a rollout, for an agent
// of the new pods to answer its status.
const newAgentWait = time.Minute

// updateAgent moves profile name's agent to image (plug update --agent),
// and then reports the rights the new agent lacks.
func (c *cli) updateAgent(store keys.Store, name, image string, wait time.Duration) error {
	cfg, err := questionConfig(store, name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait+5*time.Minute)
	defer cancel()
	fmt.Fprintf(c.stderr, "plug: asking the agent of %s to move to image %s\n", name, image)
	var saying sync.Mutex // the rollout's progress and watchRefusals' goroutine both say
	say := func(text string) {
		saying.Lock()
		defer saying.Unlock()
		io.WriteString(c.stderr, text)
	}
	watching, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchRefusals(watching, cfg, say)
	}()
	res, err := tunnel.UpdateAgent(ctx, cfg, image, wait, func(line string) { say("plug: " + line + "\n") })
	stopWatching()
	<-watched
	var lost *tunnel.UpdateLostError
	switch {
	case errors.As(err, &lost):
		fmt.Fprintf(c.stderr, "plug: %v; an old agent stops once the new one is ready: asking which agent answers now\n", lost)
	case err != nil:
		return &exitCode{ExitFailed, fmt.Errorf("the agent was not moved: %w", err)}
	case res.UndoFailed != "":
		return &exitCode{ExitFailed, fmt.Errorf("the move to %s failed: %s; and the undo failed: %s", image, res.Failed, res.UndoFailed)}
	case res.Failed != "":
		return &exitCode{ExitFailed, fmt.Errorf("the move to %s failed and was undone (%s runs %s again): %s", image, res.Workload, res.From, res.Failed)}
	default:
		fmt.Fprintf(c.stderr, "plug: %s runs image %s (was %s): pod(s) %s ready\n", res.Workload, res.To, res.From, strings.Join(res.Pods, ", "))
	}
	isNew := func(agent string) bool { return slices.Contains(res.Pods, agent) }
	if lost != nil {
		isNew = func(agent string) bool { return agent != "" && agent != lost.Agent }
	}
	st, version, err := awaitNewAgent(ctx, cfg, isNew)
	if err != nil {
		return &exitCode{ExitFailed, fmt.Errorf("no agent of the new pods answered within %s (%v): plug doctor -p %s says which rights it lacks once one does", newAgentWait, err, name)}
	}
	fmt.Fprintf(c.stderr, "plug: the new agent %s answers: plug %s\n", st.Agent, version)
	d := &doctor{out: c.stderr}
	d.rights(st, false)
	if st.RightsError == "" && !slices.ContainsFunc(st.Rights, func(r tunnel.Right) bool { return !r.Granted }) {
		fmt.Fprintf(c.stderr, "plug: the new agent has every right its features use\n")
	}
	if version != tunnel.Version {
		fmt.Fprintf(c.stderr, "plug: this plug is %s: plug update -p %s brings it to the agent's %s\n", tunnel.Version, name, version)
	}
	return nil
}

// awaitNewAgent asks the agent's status until one isNew says is of the
// new pods answers, up to newAgentWait: the Service may still send a
// connection to an old agent that is stopping.
func awaitNewAgent(ctx context.Context, cfg tunnel.ClientConfig, isNew func(agent string) bool) (*tunnel.AgentStatus, string, error) {
	ctx, cancel := context.WithTimeout(ctx, newAgentWait)
	defer cancel()
	err := errors.New("no answer yet")
	for {
		diag, derr := tunnel.Diagnose(ctx, cfg)
		switch {
		case derr != nil:
			err = derr
		case diag.Status == nil:
			err = fmt.Errorf("the agent (plug %s) does not answer the status request", diag.AgentVersion)
		case isNew(diag.Status.Agent):
			return diag.Status, diag.Status.Version, nil
		default:
			err = fmt.Errorf("agent %s, an old one, answered", diag.Status.Agent)
		}
		select {
		case <-ctx.Done():
			return nil, "", err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// refusalsEvery is how often watchRefusals asks an agent's status.
const refusalsEvery = 5 * time.Second

// watchRefusals asks the status of the agent at cfg's address every
// refusalsEvery until ctx ends, and says (one text of whole lines), once
// per agent and refusal, each agent that refuses runs with the rights it
// lacks: a new agent lacking a right that runs need is never ready, and the
// rollout waits for it (the Service reaches an agent that is not ready too).
// Once the right is granted, the next status request lets the agent serve.
func watchRefusals(ctx context.Context, cfg tunnel.ClientConfig, say func(text string)) {
	told := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(refusalsEvery):
		}
		diag, err := tunnel.Diagnose(ctx, cfg)
		if err != nil || diag.Status == nil || diag.Status.Refusing == "" || told[diag.Status.Agent+"\n"+diag.Status.Refusing] {
			continue
		}
		st := diag.Status
		told[st.Agent+"\n"+st.Refusing] = true
		var b bytes.Buffer
		fmt.Fprintf(&b, "plug: agent %s (plug %s) does not serve runs, and is not ready until it does: %s\n", st.Agent, st.Version, st.Refusing)
		(&doctor{out: &b}).rights(st, false)
		say(b.String())
	}
}
