package lifeline

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Tether is a command tied to this process by Tie.
type Tether struct{ cmd *exec.Cmd }

// job is the job object plug puts itself in, once.
var job struct {
	once sync.Once
	err  error
}

// Tie makes sure this process is in a job object that Windows terminates,
// with every process in it, when this process ends (see the package's
// documentation); cmd, started afterwards, inherits the job. cmd itself is
// not changed.
//
// When Tie fails, the returned Tether still works, only without the
// guarantee.
func Tie(cmd *exec.Cmd) (*Tether, error) {
	job.once.Do(func() { job.err = joinJob() })
	if job.err != nil {
		return &Tether{cmd: cmd}, fmt.Errorf("cannot put plug in a job object that ends the command with it: %w", job.err)
	}
	return &Tether{cmd: cmd}, nil
}

// joinJob puts this process in a new job object with
// JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE. Its handle is never closed: it
// closes when the process ends, however it ends, and so ends the job.
func joinJob() error {
	h, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return err
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(h, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(h)
		return err
	}
	if err := windows.AssignProcessToJobObject(h, windows.CurrentProcess()); err != nil {
		windows.CloseHandle(h)
		return err
	}
	return nil
}

// Started does nothing on Windows.
func (t *Tether) Started() {}

// Cut ends the command's process at once, if it still runs; what it
// started ends with plug's job.
func (t *Tether) Cut() {
	if t.cmd.Process != nil {
		t.cmd.Process.Kill()
	}
}

// Guard is the guardian of Linux and macOS, which Windows does not need
// (the job object ends the command): it only says so.
func Guard([]string) int {
	fmt.Fprintln(os.Stderr, "plug: "+HelperArg+" is run by plug itself, on Linux and macOS")
	return 2
}
