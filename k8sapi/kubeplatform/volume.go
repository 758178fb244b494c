package kubeplatform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// Volumes (plug --volume): a helper pod, running this very image as
// `plug smb`, mounts the same volume source as the workload and serves it
// over SMB on helperPort; a Service of the helper's name answers on 445.
// The helper runs as the workload's uid and gid, read in the workload's
// process (/proc/1/status, through pods/exec) or else in its
// securityContext, with its fsGroup, no capability, no privilege
// escalation and the runtime's seccomp profile: Pod Security restricted.
// A workload that runs as root, or whose uid can be read nowhere, gets a
// helper that starts as root with SETUID and SETGID alone and serves as
// the owner of the volume's root (`plug smb --as-owner`).
//
// The Service carries the run's receipt (AnnotationVolume) and a
// heartbeat; the pod is owned by the Service, so that deleting the Service
// deletes the pod. ReleaseVolume deletes both; the sweep deletes those
// whose agent pod is gone or whose heartbeat is stale.

var _ tunnel.VolumeServer = (*Platform)(nil)

const (
	// LabelVolume marks a volume helper's pod and Service; its value is
	// the helper's name.
	LabelVolume = "plug.dev/volume"
	// AnnotationVolume holds a helper's receipt (JSON) on its Service.
	AnnotationVolume = "plug.dev/volume-receipt"
	// helperPort is where the helper listens; its Service answers on 445.
	helperPort  = 1445
	servicePort = 445
	// helperMount is where the helper mounts the volume.
	helperMount = "/volume"
	// helperShare is the SMB share's name.
	helperShare = "volume"
	// volumeExecTimeout bounds the reading of the workload's /proc/1/status.
	volumeExecTimeout = 10 * time.Second
	// helperMemory is the helper's memory limit, and helperGoMemory the Go
	// runtime's soft limit inside it: plug smb's buffers stay under about
	// 75 MiB whatever its clients send (48 large buffers server-wide and
	// the small ones of 40 connections), the runtime collects garbage
	// before the heap passes 96 MiB, and the rest is for the kernel's
	// socket buffers, charged to the pod, and the binary.
	helperMemory   = "192Mi"
	helperGoMemory = "96MiB"
)

// volumeReceipt is what a helper's Service says of it.
type volumeReceipt struct {
	Holder   holder `json:"holder"`
	Pod      string `json:"pod,omitempty"` // the agent pod holding it; "" outside a pod
	Workload string `json:"workload"`      // KIND/NAME:VOLUME
}

// Sources a second pod cannot mount: they belong to the workload's pod.
var podOwnedSources = map[string]string{
	"emptyDir":  "an emptyDir lives and dies with its pod: no other pod can mount it. Give the workload a PersistentVolumeClaim to share its files",
	"ephemeral": "a generic ephemeral volume belongs to its pod: its claim is made for that pod alone",
	"image":     "an image volume is the workload's own copy of an image; pull the image instead",
}

// Sources a helper serves read-only, whatever the workload's mount says.
var readOnlySources = map[string]string{
	"configMap":   "ConfigMap",
	"secret":      "Secret",
	"projected":   "projected volume",
	"downwardAPI": "downward API volume",
}

// ServeVolume makes the helper of req; see tunnel.VolumeServer.
func (p *Platform) ServeVolume(ctx context.Context, req tunnel.VolumeRequest) (tunnel.Volume, error) {
	if err := tunnel.CheckVolumeRequest(req); err != nil {
		return tunnel.Volume{}, err
	}
	if req.Kind == tunnel.WorkloadService {
		return tunnel.Volume{}, fmt.Errorf("a Kubernetes Service has no volumes: name the workload behind it, e.g. deploy/%s:%s", req.Name, req.Volume)
	}
	w, err := p.findWorkload(ctx, tunnel.EnvRequest{Kind: req.Kind, Name: req.Name})
	if err != nil {
		return tunnel.Volume{}, err
	}
	plan, err := p.planHelper(ctx, w, req.Volume)
	if err != nil {
		return tunnel.Volume{}, err
	}
	if req.ReadOnly && !plan.readOnly {
		plan.readOnly = true
		plan.detail += ", read-only"
	}
	image, pull, err := p.helperImage(ctx)
	if err != nil {
		return tunnel.Volume{}, err
	}
	name, err := helperName()
	if err != nil {
		return tunnel.Volume{}, err
	}
	user, password := tunnel.NewVolumeCredential()
	rc := volumeReceipt{Holder: holderOf(req.Holder), Pod: p.pod, Workload: req.String()}
	raw, _ := json.Marshal(rc)
	labels := map[string]string{LabelManagedBy: ManagedBy, LabelVolume: name}
	svc := &k8sapi.Service{
		Metadata: k8sapi.ObjectMeta{Name: name, Labels: labels,
			Annotations: map[string]string{AnnotationVolume: string(raw), AnnotationHeartbeat: heartbeatNow()}},
		Spec: k8sapi.ServiceSpec{Selector: map[string]string{LabelVolume: name},
			Ports: []k8sapi.ServicePort{{Name: "smb", Protocol: "TCP", Port: servicePort, TargetPort: &k8sapi.IntOrString{Int: helperPort}}}},
	}
	svc.APIVersion, svc.Kind = "v1", "Service"
	p.mu.Lock()
	if p.volumes == nil {
		p.volumes = map[string]volumeReceipt{}
	}
	p.volumes[name] = rc // held before it exists: a sweep meanwhile leaves it alone
	p.mu.Unlock()
	created, err := p.c.Services(p.ns).Create(ctx, svc)
	if err != nil {
		p.forgetVolume(name)
		return tunnel.Volume{}, p.createError("services", "the helper's Service", err)
	}
	pod := plan.pod(name, image, pull, user, password, labels, created.Metadata.UID)
	if err := helperIdentity(pod); err != nil {
		p.removeHelper(context.WithoutCancel(ctx), name)
		return tunnel.Volume{}, err
	}
	made, err := k8sapi.Resources[map[string]any](p.c, k8sapi.KindPod, p.ns).Create(ctx, &pod)
	if err != nil {
		p.removeHelper(context.WithoutCancel(ctx), name)
		return tunnel.Volume{}, p.helperRefused(plan, err)
	}
	if err := helperIdentity(*made); err != nil { // changed by an admission webhook
		p.removeHelper(context.WithoutCancel(ctx), name)
		return tunnel.Volume{}, fmt.Errorf("the cluster changed the volume helper pod as it was created: %w; it was deleted", err)
	}
	if err := p.awaitHelper(ctx, name); err != nil {
		p.removeHelper(context.WithoutCancel(ctx), name)
		return tunnel.Volume{}, err
	}
	p.logf("volume %s of %s: helper %s serves it (%s)", req.Volume, w.what, name, plan.detail)
	return tunnel.Volume{ID: name, Host: name, Port: servicePort, Share: helperShare, User: user, Password: password,
		ReadOnly: plan.readOnly, Detail: plan.detail}, nil
}

// ReleaseVolume deletes the helper id and its Service; see
// tunnel.VolumeServer.
func (p *Platform) ReleaseVolume(ctx context.Context, id string) error {
	err := p.removeHelper(ctx, id)
	if err == nil {
		p.forgetVolume(id)
	}
	return err
}

func (p *Platform) forgetVolume(name string) {
	p.mu.Lock()
	delete(p.volumes, name)
	p.mu.Unlock()
}

// removeHelper deletes the helper pod and the Service called name; what
// is gone already is no error.
func (p *Platform) removeHelper(ctx context.Context, name string) error {
	var errs []error
	if err := p.c.Pods(p.ns).Delete(ctx, name, nil); err != nil && !k8sapi.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting the helper pod %s: %w", name, err))
	}
	if err := p.c.Services(p.ns).Delete(ctx, name, nil); err != nil && !k8sapi.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting the helper Service %s: %w", name, err))
	}
	return errors.Join(errs...)
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
	source   map[string]json.RawMessage // the workload's volume source
	readOnly bool
	node     string // the node it must run on; "" for any
	uid, gid *int64 // nil uid: as root, serving as the volume root's owner
	why      string // why the helper is not restricted (uid nil), for messages
	sc       *k8sapi.PodSecurityContext
	detail   string
}

// planHelper decides the helper of the volume called volume of w, or
// refuses it, before anything is created.
func (p *Platform) planHelper(ctx context.Context, w *workload, volume string) (*helperPlan, error) {
	spec := &w.pod.pod.Spec
	var vol *k8sapi.Volume
	var names []string
	for i := range spec.Volumes {
		names = append(names, spec.Volumes[i].Name)
		if spec.Volumes[i].Name == volume {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil {
		if len(names) == 0 {
			return nil, fmt.Errorf("%s has no volumes", w.what)
		}
		return nil, fmt.Errorf("%s has no volume %q; its volumes: %s", w.what, tunnel.PeerText(volume), strings.Join(names, ", "))
	}
	if len(vol.Source) != 1 {
		return nil, fmt.Errorf("volume %s of %s has %d sources, not one", volume, w.what, len(vol.Source))
	}
	var kind string
	for k := range vol.Source {
		kind = k
	}
	if why, ok := podOwnedSources[kind]; ok {
		return nil, fmt.Errorf("volume %s of %s cannot be served: %s", volume, w.what, why)
	}
	plan := &helperPlan{source: vol.Source, sc: spec.SecurityContext}
	c := mounter(spec, volume)
	var what []string
	if c != nil && mountReadOnly(c, volume) {
		plan.readOnly = true
	}
	if label, ok := readOnlySources[kind]; ok {
		plan.readOnly = true
		what = append(what, label)
	} else {
		what = append(what, kind)
	}
	running := !w.pod.fromTemplate && runs(w.pod.pod)
	switch kind {
	case "persistentVolumeClaim":
		var src struct {
			ClaimName string `json:"claimName"`
			ReadOnly  bool   `json:"readOnly"`
		}
		json.Unmarshal(vol.Source[kind], &src)
		plan.readOnly = plan.readOnly || src.ReadOnly
		what[0] = "PersistentVolumeClaim " + src.ClaimName
		modes, err := p.claimModes(ctx, src.ClaimName)
		switch {
		case err != nil:
			return nil, err
		case slices.Contains(modes, "ReadWriteOncePod") && len(modes) == 1:
			return nil, fmt.Errorf("volume %s of %s cannot be served: its PersistentVolumeClaim %s is ReadWriteOncePod, which only the workload's own pod may mount", volume, w.what, src.ClaimName)
		case slices.Contains(modes, "ReadWriteMany") || slices.Contains(modes, "ReadOnlyMany"):
			what = append(what, strings.Join(modes, ","))
		case running:
			plan.node = w.pod.pod.Spec.NodeName // ReadWriteOnce, or unknown: the workload's node
			what = append(what, strings.Join(modes, ",")+" on node "+plan.node)
		}
	case "configMap", "secret", "projected", "downwardAPI":
	default:
		if running {
			plan.node = w.pod.pod.Spec.NodeName // a disk may attach to one node at a time
		}
	}
	if plan.readOnly {
		what = append(what, "read-only")
	}
	var from string
	plan.uid, plan.gid, from = p.identity(ctx, w, c)
	switch {
	case plan.uid == nil:
		plan.why = "the workload's uid could be read nowhere (not in its process, not in its securityContext)"
		what = append(what, "as the owner of the volume's root: "+plan.why)
	case *plan.uid == 0:
		plan.why = "the workload runs as root (" + from + ")"
		plan.uid, plan.gid = nil, nil
		what = append(what, "as the owner of the volume's root: "+plan.why)
	default:
		id := "uid " + strconv.FormatInt(*plan.uid, 10)
		if plan.gid != nil {
			id += " gid " + strconv.FormatInt(*plan.gid, 10)
		}
		if plan.sc != nil && plan.sc.FSGroup != nil {
			id += " fsGroup " + strconv.FormatInt(*plan.sc.FSGroup, 10)
		}
		what = append(what, "as "+id+" ("+from+")")
	}
	plan.detail = strings.Join(what, ", ")
	return plan, nil
}

// mounter is the container of spec that mounts volume (the first), or nil.
func mounter(spec *k8sapi.PodSpec, volume string) *k8sapi.Container {
	for _, list := range [][]k8sapi.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			for _, m := range list[i].VolumeMounts {
				if m.Name == volume {
					return &list[i]
				}
			}
		}
	}
	return nil
}

// mountReadOnly reports whether c mounts volume only read-only.
func mountReadOnly(c *k8sapi.Container, volume string) bool {
	ro := false
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			if !m.ReadOnly {
				return false
			}
			ro = true
		}
	}
	return ro
}

// claimModes are the access modes of the claim name: its status's once
// bound, else its spec's. A claim the agent may not read is taken as
// ReadWriteOnce (the helper then runs on the workload's node).
func (p *Platform) claimModes(ctx context.Context, name string) ([]string, error) {
	pvc, err := k8sapi.Resources[k8sapi.PersistentVolumeClaim](p.c, k8sapi.KindPVC, p.ns).Get(ctx, name)
	switch {
	case k8sapi.IsNotFound(err):
		return nil, fmt.Errorf("the PersistentVolumeClaim %s does not exist in namespace %s", name, p.ns)
	case k8sapi.IsForbidden(err):
		return []string{"ReadWriteOnce"}, nil
	case err != nil:
		return nil, fmt.Errorf("reading the PersistentVolumeClaim %s: %w", name, err)
	}
	if len(pvc.Status.AccessModes) > 0 {
		return pvc.Status.AccessModes, nil
	}
	return pvc.Spec.AccessModes, nil
}

// identity is the uid and gid the workload's process runs as, and where
// they were read: its /proc/1/status through pods/exec, else its
// container's or pod's securityContext. A nil uid could be read nowhere.
func (p *Platform) identity(ctx context.Context, w *workload, c *k8sapi.Container) (uid, gid *int64, from string) {
	pod := w.pod.pod
	if c == nil && len(pod.Spec.Containers) > 0 {
		c = &pod.Spec.Containers[0]
	}
	if c == nil {
		return nil, nil, ""
	}
	if !w.pod.fromTemplate && containerRuns(pod, c.Name) {
		ectx, cancel := context.WithTimeout(ctx, volumeExecTimeout)
		out, err := p.c.Exec(ectx, p.ns, pod.Metadata.Name, c.Name, []string{"cat", "/proc/1/status"}, 16<<10)
		cancel()
		if err == nil {
			if u, g, ok := parseStatus(string(out)); ok {
				return &u, &g, "read in its process, pod " + pod.Metadata.Name
			}
			err = errors.New("its /proc/1/status has no Uid and Gid")
		}
		p.logf("volume of %s: the uid of container %s is taken from its securityContext: cat /proc/1/status in pod %s: %v", w.what, c.Name, pod.Metadata.Name, err)
	}
	from = "from its securityContext"
	if c.SecurityContext != nil {
		uid, gid = c.SecurityContext.RunAsUser, c.SecurityContext.RunAsGroup
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		if uid == nil {
			uid = sc.RunAsUser
		}
		if gid == nil {
			gid = sc.RunAsGroup
		}
	}
	return uid, gid, from
}

// parseStatus reads the effective uid and gid of /proc/PID/status.
func parseStatus(status string) (uid, gid int64, ok bool) {
	field := func(key string) (int64, bool) {
		for _, line := range strings.Split(status, "\n") {
			rest, found := strings.CutPrefix(line, key+":")
			if !found {
				continue
			}
			f := strings.Fields(rest)
			if len(f) < 2 {
				return 0, false
			}
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil && n >= 0
		}
		return 0, false
	}
	uid, okU := field("Uid")
	gid, okG := field("Gid")
	return uid, gid, okU && okG
}

// helperImage is the agent's own image: the one PLUG_HELPER_IMAGE names
// (Options.HelperImage), else that of the agent pod's container running
// plug.
func (p *Platform) helperImage(ctx context.Context) (image, pull string, err error) {
	if p.times.HelperImage != "" {
		return p.times.HelperImage, "IfNotPresent", nil
	}
	if p.pod == "" {
		return "", "", errors.New("this agent runs outside a pod and knows no image for the volume helper: set PLUG_HELPER_IMAGE to the plug image")
	}
	var raw struct {
		Spec struct {
			Containers []struct {
				Name, Image, ImagePullPolicy string
			} `json:"containers"`
		} `json:"spec"`
	}
	full, err := k8sapi.Resources[json.RawMessage](p.c, k8sapi.KindPod, p.ns).Get(ctx, p.pod)
	if err != nil {
		return "", "", fmt.Errorf("reading the agent's own pod %s for its image: %w", p.pod, err)
	}
	if err := json.Unmarshal(*full, &raw); err != nil || len(raw.Spec.Containers) == 0 {
		return "", "", fmt.Errorf("the agent's own pod %s names no image", p.pod)
	}
	c := raw.Spec.Containers[0]
	for _, cc := range raw.Spec.Containers {
		if cc.Name == "plug" {
			c = cc
		}
	}
	return c.Image, c.ImagePullPolicy, nil
}

// helperServiceAccount is the one ServiceAccount a volume helper pod runs
// as: the namespace's default, with no token mounted, so that the agent's
// right to create pods never lends a pod another ServiceAccount's rights.
const helperServiceAccount = "default"

// helperIdentity refuses a helper pod (as sent, or as the API server
// stored it) that runs as another ServiceAccount than helperServiceAccount
// or mounts a token.
func helperIdentity(pod map[string]any) error {
	spec, _ := pod["spec"].(map[string]any)
	account, _ := spec["serviceAccountName"].(string)
	legacy, _ := spec["serviceAccount"].(string)
	automount, set := spec["automountServiceAccountToken"].(bool)
	if account != helperServiceAccount || (legacy != "" && legacy != helperServiceAccount) || !set || automount {
		return fmt.Errorf("the volume helper pod must run as the ServiceAccount %q with automountServiceAccountToken false, not as %q (token mounted: %v); the agent creates no other", helperServiceAccount, tunnel.PeerText(account+legacy), !set || automount)
	}
	return nil
}

// pod is the helper's pod spec.
func (plan *helperPlan) pod(name, image, pull, user, password string, labels map[string]string, owner string) map[string]any {
	if pull == "" {
		pull = "IfNotPresent"
	}
	args := []string{"smb", "--addr", ":" + strconv.Itoa(helperPort), "--share", helperShare}
	podSC := map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}}
	caps := map[string]any{"drop": []string{"ALL"}}
	if plan.uid == nil {
		args = append(args, "--as-owner")
		podSC["runAsUser"], podSC["runAsNonRoot"] = 0, false
		caps["add"] = []string{"SETUID", "SETGID"}
	} else {
		podSC["runAsUser"], podSC["runAsNonRoot"] = *plan.uid, true
		if plan.gid != nil {
			podSC["runAsGroup"] = *plan.gid
		}
	}
	if sc := plan.sc; sc != nil {
		if sc.FSGroup != nil {
			podSC["fsGroup"] = *sc.FSGroup
		}
		if sc.FSGroupChangePolicy != "" {
			podSC["fsGroupChangePolicy"] = sc.FSGroupChangePolicy
		}
		if len(sc.SupplementalGroups) > 0 {
			podSC["supplementalGroups"] = sc.SupplementalGroups
		}
	}
	args = append(args, helperMount)
	volume := map[string]any{"name": "volume"}
	for k, v := range plan.source {
		volume[k] = v
	}
	spec := map[string]any{
		"restartPolicy":                 "Always",
		"terminationGracePeriodSeconds": 2,
		"serviceAccountName":            helperServiceAccount,
		"automountServiceAccountToken":  false,
		"enableServiceLinks":            false,
		"securityContext":               podSC,
		"volumes":                       []any{volume},
		"containers": []any{map[string]any{
			"name": "smb", "image": image, "imagePullPolicy": pull, "args": args,
			"env": []any{
				map[string]any{"name": "PLUG_SMB_USER", "value": user},
				map[string]any{"name": "PLUG_SMB_PASSWORD", "value": password},
				map[string]any{"name": "GOMEMLIMIT", "value": helperGoMemory},
			},
			"ports":          []any{map[string]any{"name": "smb", "containerPort": helperPort}},
			"readinessProbe": map[string]any{"tcpSocket": map[string]any{"port": helperPort}, "periodSeconds": 1},
			"securityContext": map[string]any{
				"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": caps,
			},
			"resources": map[string]any{
				"requests": map[string]any{"cpu": "10m", "memory": "32Mi"},
				"limits":   map[string]any{"memory": helperMemory},
			},
			"volumeMounts": []any{map[string]any{"name": "volume", "mountPath": helperMount, "readOnly": plan.readOnly}},
		}},
	}
	if plan.node != "" {
		spec["nodeName"] = plan.node
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"name": name, "labels": labels,
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Service", "name": name, "uid": owner}},
		},
		"spec": spec,
	}
}

// createError explains a refused create of what.
func (p *Platform) createError(resource, what string, err error) error {
	if k8sapi.IsForbidden(err) {
		return fmt.Errorf("the agent may not create %s (%v): the Role lacks \"create %s\"; re-apply deploy/plug-k8s.yaml", what, err, resource)
	}
	return fmt.Errorf("creating %s: %w", what, err)
}

// helperRefused explains a helper pod the API server refused: Pod
// Security admission above all.
func (p *Platform) helperRefused(plan *helperPlan, err error) error {
	var apiErr *k8sapi.APIError
	if errors.As(err, &apiErr) && strings.Contains(apiErr.Text, "PodSecurity") {
		if plan.uid == nil {
			return fmt.Errorf("namespace %s refuses the volume helper: %s, so the helper must start as root with the capabilities SETUID and SETGID to serve as the owner of the volume's root, which the namespace's Pod Security forbids (%s). Run the workload as a non-root uid (securityContext.runAsUser), or allow baseline pods in the namespace (kubectl label ns %s pod-security.kubernetes.io/enforce=baseline --overwrite)", p.ns, plan.why, apiErr.Text, p.ns)
		}
		return fmt.Errorf("namespace %s refuses the volume helper: %s", p.ns, apiErr.Text)
	}
	return p.createError("pods", "the helper pod", err)
}

// awaitHelper waits until the helper pod name is ready, or says why it
// cannot be.
func (p *Platform) awaitHelper(ctx context.Context, name string) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		pod, err := p.c.Pods(p.ns).Get(ctx, name)
		if err == nil {
			if pod.Ready() {
				return nil
			}
			if why, final := helperTrouble(pod); final {
				return fmt.Errorf("the volume helper %s cannot start: %s", name, why)
			} else if why != "" {
				last = why
			}
		}
		select {
		case <-ctx.Done():
			if last != "" {
				return fmt.Errorf("the volume helper %s did not become ready: %s", name, last)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// helperTrouble says what keeps pod from running; final when it will not
// get better by itself.
func helperTrouble(pod *k8sapi.Pod) (why string, final bool) {
	if pod.Status.Phase == "Failed" {
		return "it failed", true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff", "RunContainerError":
				return w.Reason + ": " + w.Message, true
			}
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("it exited (%s, code %d): %s", t.Reason, t.ExitCode, t.Message), true
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" {
			return c.Reason + ": " + c.Message, false
		}
	}
	return "", false
}

// renewVolumes renews the heartbeat of the helpers held here.
func (p *Platform) renewVolumes(ctx context.Context) {
	p.mu.Lock()
	names := make([]string, 0, len(p.volumes))
	for name := range p.volumes {
		names = append(names, name)
	}
	p.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationHeartbeat: heartbeatNow()}}}
		if _, err := p.c.Services(p.ns).MergePatch(ctx, name, patch); err != nil && !k8sapi.IsNotFound(err) {
			p.logf("volume helper %s: renewing the heartbeat: %v", name, err)
		}
	}
}

// sweepVolumes deletes the helpers whose holder is gone (abandoned), and
// helper pods left without their Service.
func (p *Platform) sweepVolumes(ctx context.Context, boot bool) {
	svcs, err := p.c.Services(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: LabelVolume})
	if err != nil {
		p.logf("sweep: listing volume helpers: %v", err)
		return
	}
	have := map[string]bool{}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		name := svc.Metadata.Name
		have[name] = true
		p.mu.Lock()
		_, mine := p.volumes[name]
		p.mu.Unlock()
		if mine {
			continue
		}
		var rc volumeReceipt
		if err := json.Unmarshal([]byte(svc.Metadata.Annotations[AnnotationVolume]), &rc); err != nil {
			p.logf("sweep: the volume helper %s has no receipt plug can read; left alone", name)
			continue
		}
		why, err := p.abandoned(ctx, svc, receipt{Pod: rc.Pod}, boot)
		if err != nil || why == "" {
			continue
		}
		p.logf("sweep: removing the volume helper %s of %s: %s", name, tunnel.PeerText(rc.Workload), why)
		if err := p.removeHelper(ctx, name); err != nil {
			p.logf("sweep: %v", err)
		} else {
			p.sweeps.helpers.Add(1)
		}
	}
	pods, err := p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: LabelVolume})
	if err != nil {
		return
	}
	for _, pod := range pods.Items {
		name := pod.Metadata.Name
		p.mu.Lock()
		_, mine := p.volumes[name]
		p.mu.Unlock()
		if have[name] || mine || pod.Metadata.DeletionTimestamp != nil {
			continue
		}
		if err := p.c.Pods(p.ns).Delete(ctx, name, &k8sapi.Preconditions{UID: pod.Metadata.UID}); err == nil {
			p.logf("sweep: deleted the volume helper pod %s, whose Service is gone", name)
		}
	}
}

// helperAdmission says whether the namespace admits the two shapes of
// volume helper, asked with a dry-run create of each (nothing is stored):
// as a non-root uid (Pod Security restricted), and as root with SETUID and
// SETGID (for root workloads). Without "create pods" (in granted) it says
// nothing: that right is reported missing already.
func (p *Platform) helperAdmission(ctx context.Context, granted []tunnel.Right) []tunnel.Right {
	for _, r := range granted {
		if r.Rule == "create pods" && !r.Granted {
			return nil
		}
	}
	image := p.times.HelperImage
	if image == "" {
		image = "plug"
	}
	uid := int64(65532)
	shapes := []struct {
		rule string
		plan helperPlan
		fix  string
	}{
		{"admission of the volume helper pod", helperPlan{uid: &uid, gid: &uid}, ""},
		{"admission of the volume helper of root workloads (root, SETUID, SETGID)", helperPlan{},
			fmt.Sprintf("kubectl label ns %s pod-security.kubernetes.io/enforce=baseline --overwrite", p.ns)},
	}
	var out []tunnel.Right
	for _, sh := range shapes {
		sh.plan.source = map[string]json.RawMessage{"emptyDir": json.RawMessage(`{}`)}
		pod := sh.plan.pod("plug-vol-admission", image, "", "check", "check", map[string]string{LabelVolume: "plug-vol-admission"}, "")
		delete(pod["metadata"].(map[string]any), "ownerReferences")
		err := k8sapi.Resources[map[string]any](p.c, k8sapi.KindPod, p.ns).CreateDryRun(ctx, &pod)
		r := tunnel.Right{Rule: sh.rule, Feature: volumeFeature, Granted: err == nil, Fix: sh.fix}
		var apiErr *k8sapi.APIError
		if err != nil && errors.As(err, &apiErr) {
			r.Rule += ": refused (" + apiErr.Text + ")"
		} else if err != nil {
			r.Rule += ": not known (" + err.Error() + ")"
		}
		out = append(out, r)
	}
	return out
}
