package swarmapitest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"plug/swarmapi"
)

// engine is the state of the swarm. The Server's mutex guards it.
type engine struct {
	index    uint64 // the store version, moved on by every change
	ids      int
	node     node
	services map[string]*service // by ID
	tasks    []*swarmapi.Task    // every task, oldest first, with history
	networks map[string]*swarmapi.Network
	netIndex map[string]int // network ID → its third address byte
	hosts    map[string]int // network ID → addresses given on it
	images   map[string]swarmapi.Image
	ctrs     map[string]*container // by container ID, for running tasks
}

type node struct{ id, hostname string }

// service is a stored service: its spec as sent (raw) and as swarmapi reads it.
type service struct {
	id               string
	version          uint64
	created, updated time.Time
	raw              map[string]any
	spec             swarmapi.ServiceSpec
}

// container is a running task's container.
type container struct {
	swarmapi.Container
	task string
}

func (e *engine) init() {
	e.services = map[string]*service{}
	e.networks = map[string]*swarmapi.Network{}
	e.netIndex = map[string]int{}
	e.hosts = map[string]int{}
	e.images = map[string]swarmapi.Image{}
	e.ctrs = map[string]*container{}
	e.node = node{id: e.newID(), hostname: "node-1"}
	e.addNetwork(swarmapi.Network{Name: "ingress", Scope: "swarm", Driver: "overlay", Ingress: true})
}

// newID returns a new swarm object ID: 25 lower-case hexadecimal digits.
func (e *engine) newID() string {
	e.ids++
	sum := sha256.Sum256([]byte(strconv.Itoa(e.ids)))
	return hex.EncodeToString(sum[:])[:25]
}

func (e *engine) addNetwork(n swarmapi.Network) swarmapi.Network {
	e.index++
	n.ID = e.newID()
	e.networks[n.ID] = &n
	e.netIndex[n.ID] = len(e.netIndex)
	return n
}

// nameOf is the name of the object a request concerns, when known.
func (e *engine) nameOf(rt target, body []byte) string {
	switch {
	case rt.op == "service.create":
		var spec struct{ Name string }
		json.Unmarshal(body, &spec)
		return spec.Name
	case strings.HasPrefix(rt.op, "service.") && rt.id != "":
		if svc, err := e.service(rt.id); err == nil {
			return svc.spec.Name
		}
	case rt.op == "network.inspect":
		if n, _, err := e.network(rt.id); err == nil {
			return n.(*swarmapi.Network).Name
		}
	}
	return rt.id
}

// lookup finds the one of ids that is id, or whose name is id, or that
// starts with id.
func lookup[T any](objects map[string]T, id string, name func(T) string) (T, bool) {
	if o, ok := objects[id]; ok {
		return o, true
	}
	var found []T
	for k, o := range objects {
		if name(o) == id {
			return o, true
		}
		if strings.HasPrefix(k, id) {
			found = append(found, o)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	var zero T
	return zero, false
}

func (e *engine) service(id string) (*service, *apiError) {
	svc, ok := lookup(e.services, id, func(s *service) string { return s.spec.Name })
	if !ok {
		return nil, errorf(http.StatusNotFound, "service %s not found", id)
	}
	return svc, nil
}

// view is svc as GET /services answers it: the spec as stored.
func (e *engine) view(svc *service) map[string]any {
	mode := svc.spec.EndpointMode()
	ep := swarmapi.Endpoint{Spec: swarmapi.EndpointSpec{Mode: mode}}
	if svc.spec.EndpointSpec != nil {
		ep.Spec = *svc.spec.EndpointSpec
		ep.Ports = svc.spec.EndpointSpec.Ports
	}
	if mode == "vip" {
		for _, a := range svc.spec.NetworkAttachments() {
			ep.VirtualIPs = append(ep.VirtualIPs, swarmapi.VirtualIP{NetworkID: a.Target, Addr: fmt.Sprintf("10.0.%d.%d/24", e.netIndex[a.Target], 200+len(ep.VirtualIPs))})
		}
	}
	return map[string]any{
		"ID": svc.id, "Version": swarmapi.ObjectVersion{Index: svc.version},
		"CreatedAt": svc.created, "UpdatedAt": svc.updated, "Spec": svc.raw, "Endpoint": ep,
	}
}

func (e *engine) listServices(f filters) []map[string]any {
	out := []map[string]any{}
	for _, svc := range e.sortedServices() {
		if f.match("id", prefixOf(svc.id)) && f.match("name", prefixOf(svc.spec.Name)) && f.match("label", labelsMatch(svc.spec.Labels)) &&
			f.match("mode", func(m string) bool { return m == modeOf(svc.spec) }) {
			out = append(out, e.view(svc))
		}
	}
	return out
}

func (e *engine) sortedServices() []*service {
	return slices.SortedFunc(maps.Values(e.services), func(a, b *service) int { return a.created.Compare(b.created) })
}

func modeOf(spec swarmapi.ServiceSpec) string {
	if spec.Mode.Global != nil {
		return "global"
	}
	return "replicated"
}

// serviceName is a valid service name: a DNS label, "_" allowed inside.
var serviceName = regexp.MustCompile(`^[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*$`)

// decodeSpec reads a service spec sent by a client, resolving network
// names to IDs as the engine does, and validates it.
func (e *engine) decodeSpec(body []byte) (map[string]any, swarmapi.ServiceSpec, *apiError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var raw map[string]any
	var spec swarmapi.ServiceSpec
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, spec, errorf(http.StatusBadRequest, "the body is not a service spec: %v", err)
	}
	for _, path := range [][]string{{"TaskTemplate", "Networks"}, {"Networks"}} {
		if aerr := e.resolveNetworks(raw, path); aerr != nil {
			return nil, spec, aerr
		}
	}
	b, _ := json.Marshal(raw)
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, spec, errorf(http.StatusBadRequest, "the service spec does not decode: %v", err)
	}
	if m := spec.Mode; m.Global == nil && m.ReplicatedJob == nil && m.GlobalJob == nil && (m.Replicated == nil || m.Replicated.Replicas == nil) {
		// No mode, or no number of replicas: one replica, as the engine stores it.
		one := uint64(1)
		spec.Mode = swarmapi.ServiceMode{Replicated: &swarmapi.ReplicatedService{Replicas: &one}}
		raw["Mode"] = map[string]any{"Replicated": map[string]any{"Replicas": json.Number("1")}}
	}
	switch {
	case len(spec.Name) > 63 || !serviceName.MatchString(spec.Name):
		return nil, spec, errorf(http.StatusBadRequest, "rpc error: code = InvalidArgument desc = name must be valid as a DNS name component")
	case spec.TaskTemplate.ContainerSpec == nil || spec.TaskTemplate.ContainerSpec.Image == "":
		return nil, spec, errorf(http.StatusBadRequest, "rpc error: code = InvalidArgument desc = ContainerSpec: image reference must be provided")
	}
	if _, err := placed(spec, e.node); err != nil {
		return nil, spec, errorf(http.StatusBadRequest, "rpc error: code = InvalidArgument desc = %v", err)
	}
	return raw, spec, nil
}

// resolveNetworks makes the Target of each network attachment at path in
// raw the network's ID.
func (e *engine) resolveNetworks(raw map[string]any, path []string) *apiError {
	var v any = raw
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	list, _ := v.([]any)
	for _, a := range list {
		att, _ := a.(map[string]any)
		target, _ := att["Target"].(string)
		n, ok := lookup(e.networks, target, func(n *swarmapi.Network) string { return n.Name })
		if !ok {
			return errorf(http.StatusNotFound, "network %s not found", target)
		}
		att["Target"] = n.ID
	}
	return nil
}

func (e *engine) createService(body []byte) (string, *apiError) {
	raw, spec, aerr := e.decodeSpec(body)
	if aerr != nil {
		return "", aerr
	}
	for _, svc := range e.services {
		if svc.spec.Name == spec.Name {
			return "", errorf(http.StatusConflict, "rpc error: code = AlreadyExists desc = name conflicts with an existing object: service %s already exists", spec.Name)
		}
	}
	e.index++
	now := time.Now().UTC()
	svc := &service{id: e.newID(), version: e.index, created: now, updated: now, raw: raw, spec: spec}
	e.services[svc.id] = svc
	e.orchestrate()
	return svc.id, nil
}

func (e *engine) updateService(id, version string, body []byte) *apiError {
	svc, aerr := e.service(id)
	if aerr != nil {
		return aerr
	}
	if version != strconv.FormatUint(svc.version, 10) {
		return errorf(http.StatusInternalServerError, "rpc error: code = Unknown desc = update out of sequence")
	}
	raw, spec, aerr := e.decodeSpec(body)
	if aerr != nil {
		return aerr
	}
	if spec.Name != svc.spec.Name {
		return errorf(http.StatusNotImplemented, "rpc error: code = Unimplemented desc = renaming services is not supported")
	}
	e.index++
	svc.version, svc.updated, svc.raw, svc.spec = e.index, time.Now().UTC(), raw, spec
	e.orchestrate()
	return nil
}

func (e *engine) removeService(svc *service) {
	e.index++
	delete(e.services, svc.id)
	e.tasks = slices.DeleteFunc(e.tasks, func(t *swarmapi.Task) bool {
		if t.ServiceID == svc.id && t.Status.ContainerStatus != nil {
			delete(e.ctrs, t.Status.ContainerStatus.ContainerID)
		}
		return t.ServiceID == svc.id
	})
}

// event is the engine's event of action on service id.
func (e *engine) event(action, id string) swarmapi.Event {
	ev := swarmapi.Event{Type: "service", Action: action}
	ev.Actor.ID = id
	if svc := e.services[id]; svc != nil {
		ev.Actor.Attributes = map[string]string{"name": svc.spec.Name}
	}
	return ev
}

// placed reports whether spec's placement constraints admit n; it fails
// on a constraint it cannot read.
func placed(spec swarmapi.ServiceSpec, n node) (bool, error) {
	if spec.TaskTemplate.Placement == nil {
		return true, nil
	}
	ok := true
	for _, c := range spec.TaskTemplate.Placement.Constraints {
		key, want, eq := strings.Cut(c, "==")
		if !eq {
			key, want, _ = strings.Cut(c, "!=")
		}
		var have string
		switch strings.TrimSpace(key) {
		case "node.id":
			have = n.id
		case "node.hostname":
			have = n.hostname
		case "node.role":
			have = "manager"
		default:
			return false, fmt.Errorf("constraint %q: swarmapitest reads node.id, node.hostname and node.role, with == or !=", c)
		}
		if (have == strings.TrimSpace(want)) != eq {
			ok = false
		}
	}
	return ok, nil
}

// slots are the task slots spec asks for on the node: 1..replicas, or 0
// for a global service placed there.
func slotsOf(spec swarmapi.ServiceSpec, n node) []int {
	m := spec.Mode
	switch {
	case m.Global != nil:
		if ok, _ := placed(spec, n); ok {
			return []int{0}
		}
	case m.Replicated != nil:
		replicas := uint64(1)
		if m.Replicated.Replicas != nil {
			replicas = *m.Replicated.Replicas
		}
		var slots []int
		for i := 1; i <= int(replicas); i++ {
			slots = append(slots, i)
		}
		return slots
	}
	return nil
}

// orchestrate makes every service's tasks what its spec asks for.
func (e *engine) orchestrate() {
	for _, svc := range e.sortedServices() {
		template, _ := json.Marshal(svc.spec.TaskTemplate)
		want := slotsOf(svc.spec, e.node)
		filled := map[int]bool{}
		_, runnable := e.lookupImage(svc.spec.TaskTemplate.ContainerSpec.Image)
		for _, t := range e.tasks {
			if t.ServiceID != svc.id || t.DesiredState != "running" {
				continue
			}
			tt, _ := json.Marshal(t.Spec)
			switch {
			case !slices.Contains(want, t.Slot) || !bytes.Equal(tt, template):
				e.stop(t, "shutdown", "shutdown")
			case t.Status.State == "rejected" && runnable:
				e.stop(t, "rejected", "shutdown") // its image is there now: start another
			default:
				filled[t.Slot] = true
			}
		}
		for _, slot := range want {
			if !filled[slot] && !e.restartRefused(svc, slot) {
				e.start(svc, slot)
			}
		}
	}
}

// restartRefused reports whether the slot's last task ended by itself
// and the service's restart policy says not to start another.
func (e *engine) restartRefused(svc *service, slot int) bool {
	rp := svc.spec.TaskTemplate.RestartPolicy
	if rp == nil || rp.Condition != "none" {
		return false
	}
	for _, t := range slices.Backward(e.tasks) {
		if t.ServiceID == svc.id && t.Slot == slot {
			return t.Status.State == "failed" || t.Status.State == "complete"
		}
	}
	return false
}

// start starts a task of svc in slot: running, or rejected when the
// engine has not the image.
func (e *engine) start(svc *service, slot int) {
	e.index++
	image := svc.spec.TaskTemplate.ContainerSpec.Image
	t := &swarmapi.Task{ID: e.newID(), ServiceID: svc.id, NodeID: e.node.id, Slot: slot, Spec: svc.spec.TaskTemplate, DesiredState: "running"}
	t.Status.Timestamp = time.Now().UTC()
	for _, a := range svc.spec.NetworkAttachments() {
		n := e.networks[a.Target]
		att := swarmapi.NetworkAttachment{Addresses: []string{e.address(a.Target) + "/24"}}
		att.Network.ID = n.ID
		att.Network.Spec.Name, att.Network.Spec.Attachable, att.Network.Spec.Ingress = n.Name, n.Attachable, n.Ingress
		t.NetworksAttachments = append(t.NetworksAttachments, att)
	}
	img, ok := e.lookupImage(image)
	if !ok {
		t.Status.State, t.Status.Message, t.Status.Err = "rejected", "preparing", "No such image: "+image
		e.tasks = append(e.tasks, t)
		return
	}
	sum := sha256.Sum256([]byte(t.ID))
	c := &container{task: t.ID}
	c.ID = hex.EncodeToString(sum[:])
	c.Name = fmt.Sprintf("/%s.%d.%s", svc.spec.Name, slot, t.ID)
	c.Config.Hostname, c.Config.Image = c.ID[:12], image
	c.Config.Env = containerEnv(img.Config.Env, svc.spec.TaskTemplate.ContainerSpec.Env)
	c.Config.User = cmp.Or(svc.spec.TaskTemplate.ContainerSpec.User, img.Config.User) // the service's user, else the image's
	c.Config.Labels = map[string]string{"com.docker.swarm.task.id": t.ID, "com.docker.swarm.service.id": svc.id, "com.docker.swarm.service.name": svc.spec.Name}
	c.State.Running, c.State.Status = true, "running"
	c.NetworkSettings.Networks = map[string]swarmapi.EndpointSettings{}
	for i, a := range t.NetworksAttachments {
		ip, _, _ := strings.Cut(a.Addresses[0], "/")
		c.NetworkSettings.Networks[a.Network.Spec.Name] = swarmapi.EndpointSettings{NetworkID: a.Network.ID, IPAddress: ip, Aliases: svc.spec.NetworkAttachments()[i].Aliases}
	}
	e.ctrs[c.ID] = c
	t.Status.State, t.Status.Message = "running", "started"
	t.Status.ContainerStatus = &swarmapi.ContainerStatus{ContainerID: c.ID, PID: 1000 + e.ids}
	e.tasks = append(e.tasks, t)
}

// containerEnv is a task container's environment as the engine makes it:
// the image's ENV, each of the service's variables replacing the image's
// of the same name or following them.
func containerEnv(image, service []string) []string {
	env := append([]string(nil), image...)
	for _, kv := range service {
		name, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") })
		if i >= 0 {
			env[i] = kv
		} else {
			env = append(env, kv)
		}
	}
	return env
}

// address gives the next address on network id.
func (e *engine) address(id string) string {
	e.hosts[id]++
	return fmt.Sprintf("10.0.%d.%d", e.netIndex[id], e.hosts[id]+1)
}

// stop ends task t in state, wanting it desired from now on.
func (e *engine) stop(t *swarmapi.Task, state, desired string) {
	e.index++
	if t.Status.ContainerStatus != nil {
		delete(e.ctrs, t.Status.ContainerStatus.ContainerID)
	}
	t.Status.State, t.DesiredState, t.Status.Timestamp = state, desired, time.Now().UTC()
}

func (e *engine) task(id string) (any, int, *apiError) {
	for _, t := range e.tasks {
		if t.ID == id {
			return t, http.StatusOK, nil
		}
	}
	return nil, 0, errorf(http.StatusNotFound, "task %s not found", id)
}

func (e *engine) listTasks(f filters) []*swarmapi.Task {
	out := []*swarmapi.Task{}
	for _, t := range e.tasks {
		svc := e.services[t.ServiceID]
		if f.match("id", prefixOf(t.ID)) && f.match("node", equal(t.NodeID)) && f.match("desired-state", equal(t.DesiredState)) &&
			f.match("service", func(v string) bool { return v == t.ServiceID || v == svc.spec.Name }) {
			out = append(out, t)
		}
	}
	return out
}

func (e *engine) network(id string) (any, int, *apiError) {
	n, ok := lookup(e.networks, id, func(n *swarmapi.Network) string { return n.Name })
	if !ok {
		return nil, 0, errorf(http.StatusNotFound, "network %s not found", id)
	}
	return n, http.StatusOK, nil
}

func (e *engine) listNetworks(f filters) []*swarmapi.Network {
	out := []*swarmapi.Network{}
	for _, n := range slices.SortedFunc(maps.Values(e.networks), func(a, b *swarmapi.Network) int { return strings.Compare(a.Name, b.Name) }) {
		if f.match("id", prefixOf(n.ID)) && f.match("driver", equal(n.Driver)) && f.match("scope", equal(n.Scope)) &&
			f.match("name", func(v string) bool { return strings.Contains(n.Name, v) }) && f.match("label", labelsMatch(n.Labels)) {
			out = append(out, n)
		}
	}
	return out
}

func (e *engine) container(id string) (any, int, *apiError) {
	for _, c := range e.ctrs {
		if c.ID == id || strings.HasPrefix(c.ID, id) && len(id) >= 12 || c.Name == "/"+id || c.Config.Hostname == id {
			return c.Container, http.StatusOK, nil
		}
	}
	return nil, 0, errorf(http.StatusNotFound, "No such container: %s", id)
}

// lookupImage finds an image by a name it is tagged with (":latest" when
// no tag is given) or by ID.
func (e *engine) lookupImage(name string) (swarmapi.Image, bool) {
	if img, ok := e.images[name]; ok {
		return img, true
	}
	if !strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		if img, ok := e.images[name+":latest"]; ok {
			return img, true
		}
	}
	for _, img := range e.images {
		if img.ID == name {
			return img, true
		}
	}
	return swarmapi.Image{}, false
}

func (e *engine) image(name string) (any, int, *apiError) {
	img, ok := e.lookupImage(name)
	if !ok {
		return nil, 0, errorf(http.StatusNotFound, "No such image: %s", name)
	}
	return img, http.StatusOK, nil
}
