package swarmplatform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// Volumes (plug --volume service/NAME:/MOUNT): a helper service, one task
// of the agent's own image running `plug smb`, mounts what the workload
// mounts at /MOUNT (the same named volume, or the same path of the node
// for a bind mount) on the node of the workload's task, and serves it over
// SMB on port 445 of the agent's first network, under the helper's own
// service name, which the run dials through the agent. It runs as the
// workload's user (its container's, else its service's, else its image's,
// when that is numeric) with every capability dropped; a workload that runs
// as root, or as a user name only its image resolves, gets a helper that
// starts as root with SETUID and SETGID alone and serves as the owner of
// the mount's root (`plug smb --as-owner`).
//
// The helper carries the run's lease (labels plug.dev/holder, task,
// heartbeat, as a relay does) and plug.dev/volume: ReleaseVolume removes
// it, and the sweep of any agent removes those whose holder is gone.

var _ tunnel.VolumeServer = (*Platform)(nil)

const (
	// labelVolume marks a volume helper; its value is the volume it
	// serves, KIND/NAME:MOUNT.
	labelVolume = "plug.dev/volume"
	// helperPort is where the helper listens, on its own address; the
	// image's unprivileged user may, with the sysctl relays have too.
	helperPort = 445
	// helperMount is where the helper mounts the volume.
	helperMount = "/volume"
	// helperShare is the SMB share's name.
	helperShare = "volume"
	// helperGoMemory is the Go runtime's soft memory limit in the helper,
	// as on Kubernetes.
	helperGoMemory = "96MiB"
	// helperStopGrace is how long the helper has to stop before it is
	// killed; plug smb stops at once.
	helperStopGrace = 2 * time.Second
)

// ServeVolume makes the helper of req; see tunnel.VolumeServer.
func (p *Platform) ServeVolume(ctx context.Context, req tunnel.VolumeRequest) (tunnel.Volume, error) {
	if err := tunnel.CheckVolumeRequest(req); err != nil {
		return tunnel.Volume{}, err
	}
	if req.Kind != tunnel.WorkloadService {
		return tunnel.Volume{}, fmt.Errorf("on Docker Swarm, name a service and the path it mounts the volume at: --volume service/%s:/data (docker service inspect %s lists its mounts)", req.Name, req.Name)
	}
	if len(p.opts.Networks) == 0 {
		return tunnel.Volume{}, errors.New("this agent is on no overlay network, so its volume helper would be on none: attach it to the application's network (docker service update --network-add NETWORK plug_agent)")
	}
	svc, err := p.deployed(ctx, req.Name)
	if err != nil {
		return tunnel.Volume{}, err
	}
	if svc == nil {
		return tunnel.Volume{}, fmt.Errorf("service/%s does not exist in this swarm (docker service ls lists the services)", req.Name)
	}
	plan, err := p.planHelper(ctx, svc, req.Volume)
	if err != nil {
		return tunnel.Volume{}, err
	}
	if req.ReadOnly && !plan.readOnly { // PLUG_OPEN_VOLUMES=read-only
		plan.readOnly = true
		plan.detail += ", read-only"
	}
	name, err := helperName()
	if err != nil {
		return tunnel.Volume{}, err
	}
	user, password := tunnel.NewVolumeCredential()
	l := lease{Holder: req.Holder, Task: p.opts.Task, Heartbeat: time.Now()}
	spec := p.helperSpec(plan, name, req.String(), l, user, password)
	p.holdLeased(name, true) // held before it exists: a sweep meanwhile leaves it alone
	since := time.Now()
	id, err := p.opts.Client.CreateService(ctx, spec)
	if err != nil {
		p.holdLeased(name, false)
		return tunnel.Volume{}, fmt.Errorf("creating the volume helper service %s: %w", name, err)
	}
	if err := p.waitTask(ctx, id, "the volume helper service "+name, since); err != nil {
		p.ReleaseVolume(context.WithoutCancel(ctx), name)
		return tunnel.Volume{}, err
	}
	p.opts.Logf("volume %s of service %s: helper %s serves it (%s)", req.Volume, svc.Spec.Name, name, plan.detail)
	return tunnel.Volume{ID: name, Host: name, Port: helperPort, Share: helperShare, User: user, Password: password,
		ReadOnly: plan.readOnly, Detail: plan.detail}, nil
}

// ReleaseVolume removes the helper service id; see tunnel.VolumeServer.
// The engine stops a removed service's task seconds later: a task of it on
// the agent's node is stopped at once, so that the share ends with the run.
func (p *Platform) ReleaseVolume(ctx context.Context, id string) error {
	tasks, _ := p.opts.Client.Tasks(ctx, map[string][]string{"service": {id}})
	err := p.opts.Client.RemoveService(ctx, id)
	if err != nil && !swarmapi.IsNotFound(err) {
		return fmt.Errorf("removing the volume helper service %s: %w", id, err)
	}
	p.holdLeased(id, false)
	for _, t := range tasks {
		if cs := t.Status.ContainerStatus; cs != nil && cs.ContainerID != "" && t.NodeID == p.opts.Node {
			if err := p.opts.Client.StopContainer(ctx, cs.ContainerID, helperStopGrace); err != nil {
				p.opts.Logf("volume helper %s: stopping its container: %v (the engine stops it)", id, err)
			}
		}
	}
	return nil
}

func helperName() (string, error) {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "plug-vol-" + hex.EncodeToString(b), nil
}

// helperPlan is the helper a volume gets.
type helperPlan struct {
	mount    swarmapi.Mount // the workload's, its Target still the workload's
	node     string         // the node it must run on; "" for any
	readOnly bool
	user     string   // "UID:GID" to run as; "" to serve as the mount root's owner
	groups   []string // the workload's supplementary groups
	detail   string
}

// Mount types another container cannot share, and why.
var unsharedMounts = map[string]string{
	"tmpfs": "a tmpfs mount lives in its task's container's memory and dies with it: no other container can mount it. Give the service a named volume or a bind mount to share its files",
	"npipe": "a named pipe is a Windows host's, not a volume",
}

// planHelper decides the helper of what svc mounts at target, or refuses
// it, before anything is created.
func (p *Platform) planHelper(ctx context.Context, svc *swarmapi.Service, target string) (*helperPlan, error) {
	what := "service/" + svc.Spec.Name
	if svc.Spec.Labels[labelVolume] != "" || svc.Spec.Labels[labelRelay] != "" || svc.ID == p.opts.Service {
		return nil, fmt.Errorf("%s is plug's own: it has no volume of a workload to serve", what)
	}
	cs := svc.Spec.TaskTemplate.ContainerSpec
	if cs == nil {
		return nil, fmt.Errorf("%s runs no container", what)
	}
	var m *swarmapi.Mount
	var targets []string
	for i := range cs.Mounts {
		targets = append(targets, cs.Mounts[i].Target)
		if path.Clean(cs.Mounts[i].Target) == path.Clean(target) {
			m = &cs.Mounts[i]
		}
	}
	if m == nil {
		if len(targets) == 0 {
			return nil, fmt.Errorf("%s mounts nothing (no volume, bind mount or tmpfs in its spec)", what)
		}
		return nil, fmt.Errorf("%s mounts nothing at %s; its mounts: %s", what, tunnel.PeerText(target), strings.Join(targets, ", "))
	}
	if why, ok := unsharedMounts[m.Type]; ok {
		return nil, fmt.Errorf("%s at %s cannot be served: %s", what, m.Target, why)
	}
	plan := &helperPlan{mount: *m, readOnly: m.ReadOnly, groups: cs.Groups}
	var parts []string
	switch m.Type {
	case "volume":
		if m.Source == "" {
			return nil, fmt.Errorf("%s at %s cannot be served: its volume is anonymous, made for each task alone; give it a name (source=NAME) to share its files", what, m.Target)
		}
		parts = append(parts, "volume "+m.Source)
	case "bind":
		parts = append(parts, "bind mount "+m.Source)
	default:
		return nil, fmt.Errorf("%s at %s cannot be served: plug serves named volumes and bind mounts, not a %s mount", what, m.Target, tunnel.PeerText(m.Type))
	}
	task, err := p.latestTask(ctx, svc)
	if err != nil {
		return nil, err
	}
	if task == nil {
		return nil, fmt.Errorf("%s at %s cannot be served: its %s is on the node of its task, and the service has run none yet; start it (docker service scale %s=1)", what, m.Target, m.Type, svc.Spec.Name)
	}
	plan.node = task.NodeID
	parts = append(parts, "on node "+task.NodeID)
	if plan.readOnly {
		parts = append(parts, "read-only")
	}
	user, from := p.workloadUser(ctx, svc, task)
	uid, gid, numeric := parseUser(user)
	switch {
	case user == "" || (numeric && uid == "0"):
		parts = append(parts, "as the owner of the mount's root: the workload runs as root ("+from+")")
	case !numeric:
		parts = append(parts, fmt.Sprintf("as the owner of the mount's root: the workload runs as the user %q of its image (%s), which plug does not resolve", tunnel.PeerText(user), from))
	default:
		plan.user = uid + ":" + gid
		parts = append(parts, "as uid "+uid+" gid "+gid+" ("+from+")")
	}
	plan.detail = strings.Join(parts, ", ")
	return plan, nil
}

// latestTask is the task of svc that runs, else the one that ran last: its
// node holds what the service mounts. nil when the service ran none.
func (p *Platform) latestTask(ctx context.Context, svc *swarmapi.Service) (*swarmapi.Task, error) {
	tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {svc.ID}})
	if err != nil {
		return nil, fmt.Errorf("listing the tasks of service %s: %w", svc.Spec.Name, err)
	}
	tasks = slices.DeleteFunc(tasks, func(t swarmapi.Task) bool { return t.NodeID == "" })
	if len(tasks) == 0 {
		return nil, nil
	}
	slices.SortFunc(tasks, func(a, b swarmapi.Task) int {
		if a.Running() != b.Running() {
			if a.Running() {
				return -1
			}
			return 1
		}
		return b.Status.Timestamp.Compare(a.Status.Timestamp)
	})
	return &tasks[0], nil
}

// workloadUser is who the workload's process runs as ("" for root), and
// where that was read: its running container on the agent's node, else its
// service's spec, else its image on the agent's node.
func (p *Platform) workloadUser(ctx context.Context, svc *swarmapi.Service, task *swarmapi.Task) (user, from string) {
	if task.Running() && task.Status.ContainerStatus != nil && task.Status.ContainerStatus.ContainerID != "" {
		if ctr, err := p.opts.Client.Container(ctx, task.Status.ContainerStatus.ContainerID); err == nil {
			return ctr.Config.User, "read in its container " + strings.TrimPrefix(ctr.Name, "/")
		}
	}
	cs := svc.Spec.TaskTemplate.ContainerSpec
	if cs.User != "" {
		return cs.User, "from its service's spec"
	}
	if img, err := p.opts.Client.Image(ctx, cs.Image); err == nil {
		return img.Config.User, "from its image " + cs.Image
	}
	return "", "its image " + cs.Image + " is not on the agent's node, and its spec names no user"
}

// parseUser reads "UID[:GID]"; numeric is false for a user or group name.
// A missing GID is the UID, as the engine makes it for a UID its image
// does not name.
func parseUser(user string) (uid, gid string, numeric bool) {
	uid, gid, hasGID := strings.Cut(user, ":")
	if !hasGID {
		gid = uid
	}
	for _, n := range []string{uid, gid} {
		if _, err := strconv.ParseUint(n, 10, 32); err != nil {
			return uid, gid, false
		}
	}
	return uid, gid, true
}

// helperSpec is the helper service of plan, called name, serving
// workload for the holder of l with the credential user, password.
func (p *Platform) helperSpec(plan *helperPlan, name, workload string, l lease, user, password string) swarmapi.ServiceSpec {
	labels := l.labels()
	labels[labelVolume] = workload
	labels[labelExpose] = strconv.Itoa(helperPort)
	args := []string{"smb", "--addr", ":" + strconv.Itoa(helperPort), "--share", helperShare}
	cs := &swarmapi.ContainerSpec{
		Image:           p.opts.Image,
		Labels:          map[string]string{labelVolume: workload}, // docker ps --filter label=plug.dev/volume
		Env:             []string{"PLUG_SMB_USER=" + user, "PLUG_SMB_PASSWORD=" + password, "GOMEMLIMIT=" + helperGoMemory},
		Groups:          plan.groups,
		Sysctls:         map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
		StopGracePeriod: int64(helperStopGrace),
		CapabilityDrop:  []string{"ALL"},
	}
	if plan.user == "" {
		args = append(args, "--as-owner")
		cs.User = "0:0"
		cs.CapabilityAdd = []string{"CAP_SETUID", "CAP_SETGID"}
	} else {
		cs.User = plan.user
	}
	cs.Args = append(args, helperMount)
	m := plan.mount
	m.Target, m.ReadOnly = helperMount, plan.readOnly
	cs.Mounts = []swarmapi.Mount{m}
	one := uint64(1)
	spec := swarmapi.ServiceSpec{
		Name:   name,
		Labels: labels,
		TaskTemplate: swarmapi.TaskSpec{
			ContainerSpec: cs,
			RestartPolicy: &swarmapi.RestartPolicy{Condition: "on-failure", Delay: int64(time.Second)},
			Networks:      []swarmapi.NetworkAttachmentConfig{{Target: p.opts.Networks[0].ID}},
		},
		Mode:         swarmapi.ServiceMode{Replicated: &swarmapi.ReplicatedService{Replicas: &one}},
		EndpointSpec: &swarmapi.EndpointSpec{Mode: "dnsrr"},
	}
	if plan.node != "" {
		spec.TaskTemplate.Placement = &swarmapi.Placement{Constraints: []string{"node.id==" + plan.node}}
	}
	return spec
}
