package cli

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"plug/tunnel"
)

// Volumes (--volume, -v): the agent makes a helper serving the workload's
// volume over SMB (tunnel.Session.Volume); plug opens a port on 127.0.0.1
// whose connections ride the run's SSH connection to the helper's port
// 445, mounts the share on LOCALDIR where it can without asking for a
// password, else prints the one command that does, and unmounts it when
// the run ends.

// volumePlan is one --volume of a run.
type volumePlan struct {
	spec   string // as given
	req    tunnel.VolumeRequest
	local  string // LOCALDIR; "" for ./VOLUME
	target *target
}

// openVolume is a volume served to the run.
type openVolume struct {
	plan    *volumePlan
	v       tunnel.Volume
	l       *portListener
	port    int    // the local port on 127.0.0.1
	dir     string // where it is mounted, or would be
	mounted bool
}

// parseVolume reads --volume [PROFILE/]KIND/NAME:VOLUME[:LOCALDIR].
func parseVolume(v string) (profile string, req tunnel.VolumeRequest, local string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("--volume %s: %s; give KIND/NAME:VOLUME[:LOCALDIR], e.g. -v deploy/web:data or -v deploy/web:data:./data (Swarm: service/NAME:/mount/path; PROFILE/KIND/NAME with several profiles)", v, why)
	}
	workload, rest, ok := strings.Cut(v, ":")
	if !ok || rest == "" {
		return "", req, "", bad("no volume named after ':'")
	}
	// LOCALDIR is what follows the second ':', and may hold ':' itself
	// (C:\data).
	req.Volume, local, _ = strings.Cut(rest, ":")
	profile, req.Kind, req.Name, err = parseWorkload(workload, "KIND/NAME")
	if err != nil {
		return "", req, "", bad(err.Error())
	}
	if err := tunnel.CheckVolumeRequest(req); err != nil {
		return "", req, "", bad(err.Error())
	}
	return profile, req, local, nil
}

// openVolumes asks each volume of the run of s, opens its local port and
// mounts it, or prints how to.
func (c *cli) openVolumes(ctx context.Context, p *plan, s *session) ([]*openVolume, error) {
	var open []*openVolume
	for _, vp := range p.volumes {
		if vp.target != s.target {
			continue
		}
		prefix := p.prefix(s.target)
		v, err := s.tunnel.Volume(ctx, vp.req)
		if err != nil {
			return open, fmt.Errorf("%s--volume %s: %v", prefix, vp.spec, err)
		}
		target := v.Host + ":" + strconv.Itoa(v.Port)
		refused := func(label string, err error) {
			fmt.Fprintf(c.stderr, "plug: %svolume %s: %v\n", prefix, label, err)
		}
		l, err := listen(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0, s.tunnel, target, vp.spec, refused)
		if err != nil {
			return open, fmt.Errorf("%s--volume %s: %v", prefix, vp.spec, err)
		}
		ov := &openVolume{plan: vp, v: v, l: l, port: l.l.Addr().(*net.TCPAddr).Port}
		open = append(open, ov)
		ov.dir = vp.local
		if ov.dir == "" {
			ov.dir = "." + string(filepath.Separator) + filepath.Base(vp.req.Volume)
		}
		fmt.Fprintf(c.stderr, "plug: %svolume %s: smb://%s@127.0.0.1:%d/%s (%s)\n", prefix, vp.spec, v.User, ov.port, v.Share, v.Detail)
		c.mount(ov, prefix)
	}
	return open, nil
}

// mountCommand is the one command that mounts ov on this OS, and whether
// plug may run it itself: without a password prompt or a privilege it
// does not have.
func mountCommand(goos string, ov *openVolume, root bool) (argv []string, auto bool) {
	v, port, dir := ov.v, strconv.Itoa(ov.port), ov.dir
	switch goos {
	case "darwin":
		// mount_smbfs mounts on a directory the user owns, unprivileged.
		return []string{"mount_smbfs", "-N", "//" + v.User + ":" + v.Password + "@127.0.0.1:" + port + "/" + v.Share, dir}, true
	case "windows":
		// net use reaches another port than 445 since Windows 11 24H2.
		return []string{"net", "use", "\\\\127.0.0.1\\" + v.Share, "/TCPPORT:" + port, "/USER:" + v.User, v.Password}, false
	}
	opts := fmt.Sprintf("port=%s,username=%s,password=%s,uid=%d,gid=%d,vers=3.0", port, v.User, v.Password, os.Getuid(), os.Getgid())
	if v.ReadOnly {
		opts += ",ro"
	}
	cmd := []string{"mount", "-t", "cifs", "//127.0.0.1/" + v.Share, dir, "-o", opts}
	if !root {
		cmd = append([]string{"sudo"}, cmd...)
	}
	return cmd, root
}

// mount mounts ov where plug may, else prints the command (and, on a Linux
// desktop, the unprivileged gio one).
func (c *cli) mount(ov *openVolume, prefix string) {
	argv, auto := mountCommand(runtime.GOOS, ov, os.Geteuid() == 0)
	if auto {
		if err := os.MkdirAll(ov.dir, 0o755); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
			cancel()
			if err == nil {
				ov.mounted = true
				fmt.Fprintf(c.stderr, "plug: %svolume %s mounted on %s\n", prefix, ov.plan.spec, ov.dir)
				return
			}
			fmt.Fprintf(c.stderr, "plug: %svolume %s: %s could not mount it (%s)\n", prefix, ov.plan.spec, argv[0], strings.TrimSpace(string(out)))
		}
	}
	fmt.Fprintf(c.stderr, "plug: %svolume %s: mount it with: %s\n", prefix, ov.plan.spec, strings.Join(argv, " "))
	if runtime.GOOS == "linux" {
		fmt.Fprintf(c.stderr, "plug: %s  or, on a desktop, without privilege: gio mount smb://%s@127.0.0.1:%d/%s\n", prefix, ov.v.User, ov.port, ov.v.Share)
	}
}

// closeVolumes unmounts what plug mounted for runs and closes the local
// ports, once.
func (c *cli) closeVolumes(runs []*session) {
	for _, s := range runs {
		open := s.volumes
		s.volumes = nil
		c.closeOpen(open)
	}
}

func (c *cli) closeOpen(open []*openVolume) {
	for _, ov := range open {
		if ov.mounted {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			args := []string{ov.dir}
			if runtime.GOOS == "darwin" {
				args = []string{"-f", ov.dir}
			}
			if out, err := exec.CommandContext(ctx, "umount", args...).CombinedOutput(); err != nil {
				fmt.Fprintf(c.stderr, "plug: volume %s: umount %s failed (%s); unmount it yourself\n", ov.plan.spec, ov.dir, strings.TrimSpace(string(out)))
			}
			cancel()
		}
		ov.l.close()
	}
}
