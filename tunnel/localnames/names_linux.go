package localnames

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SetupHow is how plug setup, which prepares this machine for the names
// once, is run here.
const SetupHow = `sudo plug setup (or sudo "$(command -v plug)" setup when sudo does not find it)`

// On Linux, CMD sees the run's names in a hosts file of its own, and
// nothing on the machine changes. plug starts CMD through itself as a small
// helper, in a new user namespace (the developer's uid and gid mapped to
// themselves, never to root) with a new mount namespace. There the helper
// mounts a private tmpfs, creates the hosts file in it, bind-mounts it
// read-only over /etc/hosts, unmounts the tmpfs, hands the file to plug
// over a socket, and executes CMD: the capability it held in its namespace
// ends at that execve. plug rewrites the file in place at each change of
// the catalog. The network namespace is the machine's: CMD reaches
// everything it reached before, /etc/resolv.conf is untouched, and other
// names resolve as before. Every reader of /etc/hosts sees the names: glibc,
// Go's own resolver, the JVM, Node, Python, getent. When CMD and its
// children end, the namespaces and the file are gone with them; after a
// crash of plug there is nothing to repair.
//
// Where the run can answer the command's DNS itself (Answer, dns_linux.go),
// the helper also puts a private file over /etc/resolv.conf, and the
// hosts file holds only the names the command has looked up.

// The helper's exit codes when it cannot run CMD: a shell's, and plug's
// own (tunnel/cli's ExitNoExec and ExitNoCmd).
const (
	exitNoExec = 126
	exitNoCmd  = 127
)

// handshakeTimeout bounds the wait for the helper to hand over the file.
const handshakeTimeout = 10 * time.Second

// nsResolver is the resolver of Linux: a private /etc/hosts for CMD.
type nsResolver struct {
	label string // names the run in the file's header
	say   func(string)

	// resolvErr is why the helper cannot put a file over /etc/resolv.conf,
	// if it cannot.
	resolvErr error

	dns    *dnsServer // the run's responder, when it answers CMD's DNS
	pool   *Pool      // the responder's address
	resolv []byte     // the resolv.conf CMD sees, with the responder

	mu      sync.Mutex
	lines   []HostLine
	hosts   *os.File // the file CMD sees, once it has started
	written []byte   // what it holds
}

// NewResolver checks, by running the helper once, that this machine lets
// plug give CMD a private /etc/hosts. label names the run in the file;
// the developer's plug directory (where macOS and Windows keep a backup of
// the hosts file) is not needed here.
func NewResolver(label, _ string, say func(string)) (Resolver, error) {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	probe := exec.CommandContext(ctx, "/proc/self/exe", HelperArg, "probe")
	probe.SysProcAttr = namespaceAttr(nil)
	var stderr bytes.Buffer
	probe.Stderr = &stderr
	out, err := probe.Output()
	if err != nil {
		detail := strings.TrimSpace(stderr.String())
		if detail == "" {
			detail = err.Error()
		}
		return nil, fmt.Errorf("this machine does not let plug give programs a private /etc/hosts (%s)%s", detail, UserNamespaceAdvice())
	}
	r := &nsResolver{label: label, say: say}
	if why, ok := strings.CutPrefix(strings.TrimSpace(string(out)), probeNoResolv); ok {
		r.resolvErr = errors.New(why)
	}
	return r, nil
}

// probeNoResolv starts the probe's output when it could not put a file
// over /etc/resolv.conf: the reason follows.
const probeNoResolv = "no resolv.conf: "

// resolvConfPath is the file whose nameservers and search domains
// resolvers read.
const resolvConfPath = "/etc/resolv.conf"

// Answer starts the run's DNS responder on a loopback address of its own,
// port 53, for the command to look names up with (see dns_linux.go). It
// fails, saying why, when the machine's resolvers would not ask it (the
// hosts line of /etc/nsswitch.conf asks systemd-resolved before DNS, or
// not DNS at all), when the helper cannot put a file over
// /etc/resolv.conf, or when port 53 cannot be bound (plug setup, or root,
// allows it).
func (r *nsResolver) Answer(lookup LookupFunc) error {
	if err := nsswitchAsksDNS(); err != nil {
		return err
	}
	if r.resolvErr != nil {
		return fmt.Errorf("the command's /etc/resolv.conf cannot be made private: %w", r.resolvErr)
	}
	machine, err := os.ReadFile(resolvConfPath)
	if err != nil {
		return err
	}
	conf := parseResolvConf(machine)
	pool := NewPool()
	addr, err := pool.Take()
	if err != nil {
		return err
	}
	dns, err := listenDNS(addr, conf, lookup)
	if err != nil {
		pool.Close()
		if IsPrivilegedPort(err) {
			return errPort53
		}
		return fmt.Errorf("cannot answer DNS on %s port 53: %w", addr, err)
	}
	r.dns, r.pool, r.resolv = dns, pool, conf.resolvText(r.label, addr)
	return nil
}

// errPort53 is why a developer's run cannot answer DNS before plug setup.
var errPort53 = errors.New("port 53 is below 1024, which needs the one-time preparation of this machine, sudo plug setup")

// Mode says how a run started now would make the names resolve, as far as
// it can tell without starting one, and whether plug setup or the
// machine's configuration could make it cheaper (improvable).
func Mode() (how string, improvable bool) {
	why := nsswitchAsksDNS()
	if why == nil {
		if _, err := os.Stat(resolvConfPath); err != nil {
			why = fmt.Errorf("%s is missing", resolvConfPath)
		}
	}
	if why == nil && os.Geteuid() != 0 {
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || n > 53 {
			why = errPort53
		}
	}
	if why == nil {
		return "a run answers its command's DNS itself, on a loopback address, port 53: a cluster name gets its address and listeners when the command first looks it up, so a run costs what the names it uses cost, whatever the namespace holds", false
	}
	return fmt.Sprintf("a run gives every cluster name its address and listeners at start, in the command's private /etc/hosts, because %v", why), true
}

// nsswitchAsksDNS fails when the hosts line of /etc/nsswitch.conf may not
// reach DNS for a name the hosts file lacks (nsswitchHostsAskDNS).
func nsswitchAsksDNS() error {
	text, err := os.ReadFile("/etc/nsswitch.conf")
	if err != nil {
		return nil // glibc then asks DNS
	}
	return nsswitchHostsAskDNS(text)
}

// nsswitchHostsAskDNS fails when the hosts line of text, an nsswitch.conf,
// may not reach DNS for a name the hosts file lacks: no dns source,
// systemd-resolved's resolve source before it (which answers without
// reading /etc/resolv.conf), or an action that returns before it (as
// mdns4_minimal [NOTFOUND=return] does for names ending in .local, which
// cluster names do). Without a hosts line, glibc asks DNS.
func nsswitchHostsAskDNS(text []byte) error {
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "hosts:" {
			continue
		}
		for i, source := range f[1:] {
			switch {
			case source == "dns":
				return nil
			case source == "resolve":
				return errors.New("the hosts line of /etc/nsswitch.conf asks systemd-resolved before DNS")
			case strings.HasPrefix(source, "[") && strings.Contains(strings.ToLower(source), "=return"):
				return fmt.Errorf("the hosts line of /etc/nsswitch.conf may stop at %s %s before it asks DNS", f[i], source)
			}
		}
		return errors.New("the hosts line of /etc/nsswitch.conf does not ask DNS")
	}
	return nil
}

// namespaceAttr makes cmd start in a new user and mount namespace, as the
// same uid and gid, holding CAP_SYS_ADMIN in that namespace only, for the
// helper to mount; the helper drops it before running CMD. Run by root,
// plug needs no user namespace, and CMD keeps root's powers over the
// machine: only the mount namespace is new.
func namespaceAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Cloneflags |= syscall.CLONE_NEWNS
	if os.Geteuid() == 0 {
		return attr
	}
	uid, gid := os.Getuid(), os.Getgid()
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
	attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	return attr
}

// UserNamespaceAdvice says what keeps unprivileged user namespaces off on
// this machine, if it can tell.
func UserNamespaceAdvice() string {
	read := func(path string) string {
		b, _ := os.ReadFile(path)
		return strings.TrimSpace(string(b))
	}
	switch {
	case read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
		return "; AppArmor restricts unprivileged user namespaces here: run sudo plug setup once, which allows them to plug alone"
	case read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
		return "; unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0): an administrator can turn them on with sysctl -w kernel.unprivileged_userns_clone=1"
	case read("/proc/sys/user/max_user_namespaces") == "0":
		return "; user namespaces are off (user.max_user_namespaces=0): an administrator can turn them on with sysctl -w user.max_user_namespaces=15000"
	}
	return ""
}

// Update rewrites the file CMD sees, once it has started.
// Shared is false: the file is the run's own.
func (r *nsResolver) Shared() bool { return false }

// Nothing is held by other runs: the file is the run's own.
func (r *nsResolver) Update(lines []HostLine) (map[string]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = lines
	if r.hosts == nil {
		return nil, nil
	}
	return nil, r.write()
}

// write puts the names and the machine's hosts file into the file CMD
// sees, in place (the bind mount holds that very file), when that changes
// what it holds.
func (r *nsResolver) write() error {
	machine, err := os.ReadFile(hostsPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	text := hostsText(r.label, r.lines, machine)
	if bytes.Equal(text, r.written) {
		return nil
	}
	if _, err := r.hosts.WriteAt(text, 0); err != nil {
		return err
	}
	r.written = text
	return r.hosts.Truncate(int64(len(text)))
}

// Start runs cmd through the helper and fills the hosts file it hands
// over before the helper executes cmd. If the helper cannot make the file,
// cmd runs without the names, and the developer is told.
func (r *nsResolver) Start(cmd *exec.Cmd) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	ours := os.NewFile(uintptr(fds[0]), "plug names")
	theirs := os.NewFile(uintptr(fds[1]), "plug names helper")
	defer ours.Close()
	argv0 := cmd.Args[0]
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, theirs)
	dns := "hosts"
	if r.dns != nil {
		dns = "dns"
	}
	cmd.Args = append([]string{"plug", HelperArg, "exec", strconv.Itoa(fd), dns, cmd.Path}, cmd.Args...)
	cmd.Path = "/proc/self/exe"
	cmd.SysProcAttr = namespaceAttr(cmd.SysProcAttr)
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return err
	}
	conn, err := net.FileConn(ours)
	if err != nil {
		cmd.Process.Kill()
		return err
	}
	defer conn.Close()
	files, err := receiveFiles(conn.(*net.UnixConn))
	if err == nil && r.dns != nil {
		if len(files) < 2 {
			err = errors.New("the helper did not make /etc/resolv.conf private")
		} else {
			_, err = files[1].Write(r.resolv)
		}
		for _, f := range files[1:] {
			f.Close()
		}
	}
	if err == nil {
		r.mu.Lock()
		r.hosts = files[0]
		err = r.write()
		r.mu.Unlock()
	}
	if err != nil {
		r.say(fmt.Sprintf("warning: cluster names do not resolve for %s: %v", filepath.Base(argv0), err))
	}
	conn.Write([]byte("go"))
	return nil
}

// receiveFiles reads the helper's answer: "ok\n" with the files attached
// (the command's /etc/hosts, then its /etc/resolv.conf when asked for), or
// "no: REASON\n".
func receiveFiles(conn *net.UnixConn) ([]*os.File, error) {
	conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var text []byte
	var files []*os.File
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(2*4))
	for !strings.Contains(string(text), "\n") {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if oobn > 0 && files == nil {
			files = filesFromRights(oob[:oobn])
		}
		text = append(text, buf[:n]...)
		if err != nil {
			break
		}
	}
	line, _, _ := strings.Cut(string(text), "\n")
	switch {
	case line == "ok" && len(files) > 0:
		return files, nil
	case strings.HasPrefix(line, "no: "):
		err := errors.New(strings.TrimPrefix(line, "no: "))
		return nil, closeAll(files, err)
	}
	return nil, closeAll(files, errors.New("the helper that starts the command ended before it was ready"))
}

// closeAll closes files and returns err.
func closeAll(files []*os.File, err error) error {
	for _, f := range files {
		f.Close()
	}
	return err
}

// filesFromRights returns the file descriptors passed in a control message.
func filesFromRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) == 0 {
		return nil
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), "a file of the command"))
	}
	return files
}

// Close lets go of the file, which vanishes when CMD's namespace ends,
// and stops the responder.
func (r *nsResolver) Close() error {
	if r.dns != nil {
		r.dns.close()
		r.pool.Close()
		r.dns = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hosts != nil {
		r.hosts.Close()
		r.hosts = nil
	}
	return nil
}

// Helper is the helper's side, in its new namespaces: "probe" checks
// that it can make the files (it fails when it cannot make /etc/hosts
// private, and prints probeNoResolv and why when it cannot make
// /etc/resolv.conf private); "exec FD hosts|dns PATH ARGV..." makes
// /etc/hosts private (and /etc/resolv.conf, with dns), hands the files
// over on FD, waits for plug's go and executes PATH.
func Helper(args []string) int {
	// Capabilities belong to a thread: the one that drops them must be
	// the one that executes CMD.
	runtime.LockOSThread()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "plug: "+HelperArg+" is run by plug itself")
		return 2
	}
	if args[0] == "probe" {
		files, err := privateFiles(hostsPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		closeAll(files, nil)
		files, err = privateFiles(resolvConfPath)
		if err != nil {
			fmt.Println(probeNoResolv + strings.ReplaceAll(err.Error(), "\n", " "))
		}
		closeAll(files, nil)
		return 0
	}
	if args[0] != "exec" || len(args) < 5 || args[2] != "hosts" && args[2] != "dns" {
		fmt.Fprintln(os.Stderr, "plug: "+HelperArg+" is run by plug itself")
		return 2
	}
	fd, err := strconv.Atoi(args[1])
	if err != nil {
		return 2
	}
	targets := []string{hostsPath}
	if args[2] == "dns" {
		targets = append(targets, resolvConfPath)
	}
	path, argv := args[3], args[4:]
	if !handOver(fd, targets) {
		return 1
	}
	if err := dropCapabilities(); os.Geteuid() != 0 && err != nil {
		fmt.Fprintf(os.Stderr, "plug: cannot drop the namespace's capability before running %s: %v\n", argv[0], err)
		return 126
	}
	err = unix.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "plug: cannot run %s: %v\n", argv[0], err)
	if errors.Is(err, unix.ENOENT) {
		return exitNoCmd
	}
	return exitNoExec
}

// handOver makes the private files over targets, passes them (or why it
// could not) to plug on fd, and waits for plug's go; false if plug is
// gone.
func handOver(fd int, targets []string) bool {
	sock := os.NewFile(uintptr(fd), "plug")
	defer sock.Close()
	c, err := net.FileConn(sock)
	if err != nil {
		return false
	}
	defer c.Close()
	conn := c.(*net.UnixConn)
	files, err := privateFiles(targets...)
	if err != nil {
		conn.Write([]byte("no: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"))
	} else {
		defer closeAll(files, nil)
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		if _, _, err := conn.WriteMsgUnix([]byte("ok\n"), unix.UnixRights(fds...), nil); err != nil {
			return false
		}
	}
	var goAhead [2]byte
	_, err = conn.Read(goAhead[:])
	return err == nil
}

// hostsPath is the hosts file resolvers read.
const hostsPath = "/etc/hosts"

// privateFiles puts a file of its own over each of targets in this mount
// namespace, read-only there, and returns them open for writing, in
// order. The files live in a tmpfs that is mounted for a moment on the
// temporary directory and unmounted at once: they are reachable only
// through the bind mounts and the returned files, and leave nothing on
// any disk.
func privateFiles(targets ...string) ([]*os.File, error) {
	// plug starts the helper in a mount namespace of its own already; this
	// thread unshares one more, so that the helper run any other way (by hand,
	// as root) changes no mount of the namespace it was started in.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("cannot make a mount namespace of its own (%v): %s is run by plug itself", err, HelperArg)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("cannot make the mounts of the new namespace private: %w", err)
	}
	scratch := os.TempDir()
	if err := unix.Mount("plug-hosts", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16m,mode=0700"); err != nil {
		return nil, fmt.Errorf("cannot mount a private tmpfs on %s: %w", scratch, err)
	}
	defer unix.Unmount(scratch, unix.MNT_DETACH)
	var files []*os.File
	for _, target := range targets {
		f, err := os.OpenFile(filepath.Join(scratch, filepath.Base(target)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, closeAll(files, err)
		}
		files = append(files, f)
		if err := unix.Mount(f.Name(), target, "", unix.MS_BIND, ""); err != nil {
			return nil, closeAll(files, fmt.Errorf("cannot mount a private file over %s: %w", target, err))
		}
		const readOnly = unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
		if err := unix.Mount("", target, "", readOnly, ""); err != nil {
			return nil, closeAll(files, fmt.Errorf("cannot make the private %s read-only: %w", target, err))
		}
	}
	return files, nil
}

// dropCapabilities empties the ambient, inheritable, permitted and
// effective sets of this thread, so that CMD starts with none, whatever
// it is. (For root, execve gives root's back.)
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return err
	}
	var none [2]unix.CapUserData
	return unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &none[0])
}
