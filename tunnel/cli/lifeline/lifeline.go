// Package lifeline starts the developer's command so that it never
// outlives plug: however plug ends — it returns, it panics, it is killed
// with SIGKILL, the laptop's session is closed — the command and every
// process it started end with it, within a second. The next run finds its
// ports free.
//
// On Linux and macOS the command is started through plug itself, as a
// small guardian process (plug with the hidden first argument
// "__plug-lifeline", left out of plug's help). plug holds the write end of
// a pipe whose read end only the guardian has: when plug ends, however it
// ends, the kernel closes that end and the guardian reads end of file. The
// guardian then kills, with SIGKILL, the command and every process
// descended from it, and exits. The command stays in plug's process group
// (the terminal's foreground job, which a Ctrl-C typed there reaches); the
// guardian moves to a group of its own, so every signal it receives was
// meant for the command (plug forwards SIGTERM, SIGHUP, and a SIGINT the
// terminal did not send), and it passes each on. It exits with the
// command's exit code, or 128+N when signal N ended the command, which is
// what plug reports of the command either way. When the command exits on
// its own, the guardian kills what the command left running and exits too.
//
//   - Linux: the guardian is a child subreaper (PR_SET_CHILD_SUBREAPER), so
//     every process the command starts, even one that detaches itself
//     (double fork, setsid), stays its descendant and is found. The command
//     also carries the parent-death signal SIGKILL, set from the guardian's
//     one locked OS thread (the signal follows the thread that started the
//     child, and that thread never exits before the child), so that killing
//     the guardian itself still ends the command. Left out: processes that
//     become another subreaper's (systemd --user, a container runtime), and
//     those that run set-user-ID programs (sudo), which the developer's uid
//     may not signal.
//   - macOS has neither a subreaper nor a parent-death signal. The guardian
//     walks the tree of its descendants (sysctl kern.proc), stopping each
//     with SIGSTOP so that none forks away while it looks, then kills them
//     all. Left out: a process that detached itself from the tree before
//     plug ended (its parent exited, so launchd adopted it), and every
//     process if the guardian itself is killed with SIGKILL.
//   - Windows: plug puts itself in a job object with
//     JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE; the command and everything it
//     starts inherit the job, and when plug's process ends, its handle of
//     the job closes and Windows terminates every process in it. No
//     guardian is needed. Left out: processes started outside the job
//     (by a service, or with CREATE_BREAKAWAY_FROM_JOB where allowed).
package lifeline

// HelperArg is the first argument with which plug runs itself as the
// guardian (Guard); it is not a command for people, and is left out of
// plug's help. main.go dispatches it.
const HelperArg = "__plug-lifeline"

// Exit codes of the guardian when it cannot run the command, as a shell's.
const (
	exitNoExec = 126
	exitNoCmd  = 127
)
