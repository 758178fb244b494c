//go:build linux || darwin

package lifeline

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
)

// Tether is a command tied to this process by Tie.
type Tether struct {
	cmd   *exec.Cmd
	keep  *os.File // this process's end of the lifeline: closing it ends the command
	child *os.File // the guardian's end, until the command has started
}

// Tie changes cmd, which must not have been started, so that the process
// cmd.Start starts is the guardian of the command cmd described (see the
// package's documentation): from then on the command, and every process it
// starts, ends when this process ends. cmd.Path must be the command's
// path, as exec.Command sets it. Call Started once cmd.Start has returned,
// and Cut when the command is done with.
//
// When Tie fails, cmd is left as it was, and the returned Tether still
// works, only without the guarantee: Cut then kills the command's own
// process.
func Tie(cmd *exec.Cmd) (*Tether, error) {
	t := &Tether{cmd: cmd}
	if cmd.Process != nil {
		return t, errors.New("lifeline: the command has started already")
	}
	exe, err := self()
	if err != nil {
		return t, fmt.Errorf("cannot find plug's own executable to start the command through: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return t, err
	}
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	cmd.Args = append([]string{"plug", HelperArg, strconv.Itoa(fd), cmd.Path}, cmd.Args...)
	cmd.Path = exe
	t.keep, t.child = w, r
	return t, nil
}

// Started lets go of this process's copy of the guardian's end of the
// lifeline. Call it once cmd.Start has returned, whether or not it
// succeeded.
func (t *Tether) Started() {
	if t.child != nil {
		t.child.Close()
		t.child = nil
	}
}

// Cut ends the command and every process it started, at once (SIGKILL),
// if they still run, as this process's own end would. Cutting again does
// nothing.
func (t *Tether) Cut() {
	t.Started()
	if t.keep == nil {
		if t.cmd.Process != nil {
			t.cmd.Process.Kill()
		}
		return
	}
	t.keep.Close()
}

// Guard is the guardian: args are the lifeline's descriptor, the command's
// path and its argv. It returns the command's exit code (128+N when
// signal N ended it).
func Guard(args []string) int {
	// Never unlocked: the command's parent-death signal (Linux) follows the
	// thread that started it, which must outlive the command.
	runtime.LockOSThread()
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "plug: "+HelperArg+" is run by plug itself")
		return 2
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil {
		return 2
	}
	syscall.CloseOnExec(fd)
	lifeline := os.NewFile(uintptr(fd), "plug's lifeline")
	path, argv := args[1], args[2:]

	becomeReaper()
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   childAttr(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "plug: cannot run %s: %v\n", argv[0], err)
		if errors.Is(err, fs.ErrNotExist) {
			return exitNoCmd
		}
		return exitNoExec
	}
	// The command stays in plug's process group, the terminal's foreground
	// job; the guardian leaves it, so that a Ctrl-C typed there reaches the
	// command once, not again through the guardian. Every signal the
	// guardian receives is meant for the command: it passes each on.
	syscall.Setpgid(0, 0)
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, lifeline) // plug never writes: this returns when it has ended
		close(gone)
	}()
	for {
		select {
		case <-gone:
			endDescendants()
			return 128 + int(syscall.SIGKILL)
		case sig := <-sigs:
			if sig != syscall.SIGCHLD {
				proc.Signal(sig)
				continue
			}
			if ws, exited := reap(proc.Pid); exited {
				endDescendants()
				if ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ws.ExitStatus()
			}
		}
	}
}

// reap collects every child that has exited; exited reports whether the
// command (pid) was one, and ws is how it ended.
func reap(pid int) (ws syscall.WaitStatus, exited bool) {
	for {
		var status syscall.WaitStatus
		got, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err != nil || got <= 0 {
			return ws, exited
		}
		if got == pid {
			ws, exited = status, true
		}
	}
}

// descendants lists the processes descended from root, given each
// process's children.
func descendants(children map[int][]int, root int) []int {
	var out []int
	next := []int{root}
	for len(next) > 0 {
		pid := next[0]
		next = next[1:]
		for _, kid := range children[pid] {
			if kid != root {
				out = append(out, kid)
				next = append(next, kid)
			}
		}
	}
	return out
}
