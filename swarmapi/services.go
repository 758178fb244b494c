package swarmapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Service is a swarm service as GET /services returns it.
type Service struct {
	ID        string
	Version   ObjectVersion
	CreatedAt time.Time
	UpdatedAt time.Time
	Spec      ServiceSpec
	Endpoint  Endpoint

	rawSpec json.RawMessage // Spec exactly as the engine sent it
}

// ObjectVersion is the swarm's version index of an object: updates must
// name the version they were computed from.
type ObjectVersion struct {
	Index uint64
}

// ServiceSpec is what plug reads of a service's spec and what it sends to
// create its own services. Updates of existing services go through RawSpec,
// which keeps every field, known here or not.
type ServiceSpec struct {
	Name         string
	Labels       map[string]string `json:",omitempty"`
	TaskTemplate TaskSpec
	Mode         ServiceMode
	EndpointSpec *EndpointSpec `json:",omitempty"`
	UpdateConfig *UpdateConfig `json:",omitempty"`
	// Networks is the deprecated place of TaskTemplate.Networks that
	// services created by old clients still carry.
	Networks []NetworkAttachmentConfig `json:",omitempty"`
}

// UpdateConfig says how a service's tasks are replaced when its spec
// changes: Order "start-first" starts the new task before the old one
// stops, "stop-first" (the engine's default) the other way round.
type UpdateConfig struct {
	Order string `json:",omitempty"`
}

// TaskSpec is the template of a service's tasks.
type TaskSpec struct {
	ContainerSpec *ContainerSpec            `json:",omitempty"`
	RestartPolicy *RestartPolicy            `json:",omitempty"`
	Placement     *Placement                `json:",omitempty"`
	Networks      []NetworkAttachmentConfig `json:",omitempty"`
}

// ContainerSpec is the container a task runs.
type ContainerSpec struct {
	Image   string
	Labels  map[string]string `json:",omitempty"`
	Command []string          `json:",omitempty"`
	Args    []string          `json:",omitempty"`
	Env     []string          `json:",omitempty"`
	User    string            `json:",omitempty"`
	Sysctls map[string]string `json:",omitempty"`
	// Hostname is the containers' hostname; "" leaves the swarm's, the
	// container ID's first 12 characters.
	Hostname string `json:",omitempty"`
	// StopGracePeriod is in nanoseconds.
	StopGracePeriod int64 `json:",omitempty"`
	// Groups are supplementary groups of the container's process.
	Groups []string `json:",omitempty"`
	// Mounts are the container's volumes, bind mounts and tmpfs.
	Mounts []Mount `json:",omitempty"`
	// CapabilityAdd and CapabilityDrop change the runtime's default
	// capabilities ("ALL" drops every one); API 1.41.
	CapabilityAdd  []string `json:",omitempty"`
	CapabilityDrop []string `json:",omitempty"`
}

// Mount is a mount of a service's containers: Type "volume" (a named
// volume, Source its name), "bind" (Source a path on the node), "tmpfs",
// "npipe" or "cluster".
type Mount struct {
	Type     string
	Source   string `json:",omitempty"`
	Target   string
	ReadOnly bool `json:",omitempty"`
	// The options of their type, as the engine wrote them.
	BindOptions   json.RawMessage `json:",omitempty"`
	VolumeOptions json.RawMessage `json:",omitempty"`
}

// RestartPolicy says when the swarm restarts a task. Delay is in nanoseconds.
type RestartPolicy struct {
	Condition string `json:",omitempty"` // "none", "on-failure", "any"
	Delay     int64  `json:",omitempty"`
}

// Placement constrains the nodes a task may run on.
type Placement struct {
	Constraints []string `json:",omitempty"`
}

// NetworkAttachmentConfig attaches a service to a network, with extra DNS
// names on it.
type NetworkAttachmentConfig struct {
	Target  string   // network ID or name
	Aliases []string `json:",omitempty"`
}

// ServiceMode is how many tasks a service runs. Exactly one field is set.
type ServiceMode struct {
	Replicated    *ReplicatedService `json:",omitempty"`
	Global        *struct{}          `json:",omitempty"`
	ReplicatedJob *json.RawMessage   `json:",omitempty"`
	GlobalJob     *json.RawMessage   `json:",omitempty"`
}

// ReplicatedService is the replicated mode: a number of tasks.
type ReplicatedService struct {
	Replicas *uint64 `json:",omitempty"`
}

// EndpointSpec is how callers reach a service: through a virtual IP ("vip",
// the default) or by DNS round robin over its tasks ("dnsrr").
type EndpointSpec struct {
	Mode  string       `json:",omitempty"`
	Ports []PortConfig `json:",omitempty"`
}

// PortConfig is a port a service publishes.
type PortConfig struct {
	Name          string `json:",omitempty"`
	Protocol      string `json:",omitempty"`
	TargetPort    uint32 `json:",omitempty"`
	PublishedPort uint32 `json:",omitempty"`
	PublishMode   string `json:",omitempty"` // "ingress" or "host"
}

// Endpoint is a service's endpoint as the swarm runs it.
type Endpoint struct {
	Spec       EndpointSpec
	Ports      []PortConfig
	VirtualIPs []VirtualIP
}

// VirtualIP is a service's virtual IP on one network.
type VirtualIP struct {
	NetworkID string
	Addr      string // CIDR
}

// EndpointMode is the spec's endpoint mode, "vip" when unset.
func (s *ServiceSpec) EndpointMode() string {
	if s.EndpointSpec == nil || s.EndpointSpec.Mode == "" {
		return "vip"
	}
	return s.EndpointSpec.Mode
}

// NetworkAttachments is where the service's tasks are attached, wherever
// the spec keeps it.
func (s *ServiceSpec) NetworkAttachments() []NetworkAttachmentConfig {
	if len(s.TaskTemplate.Networks) > 0 {
		return s.TaskTemplate.Networks
	}
	return s.Networks
}

// UnmarshalJSON decodes a service and keeps its spec's raw form.
func (s *Service) UnmarshalJSON(b []byte) error {
	type plain Service
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	var raw struct{ Spec json.RawMessage }
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	s.rawSpec = raw.Spec
	return nil
}

// RawSpec returns the service's spec as the engine sent it, for changing a
// few fields and sending it back with UpdateService.
func (s *Service) RawSpec() (RawSpec, error) {
	dec := json.NewDecoder(bytes.NewReader(s.rawSpec))
	dec.UseNumber() // keep 64-bit numbers exact
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("reading the spec of service %s: %w", s.ID, err)
	}
	return RawSpec(m), nil
}

// Services lists the services matching filter ("name" matches name
// prefixes, "label" takes "key" or "key=value", "id" ID prefixes).
func (c *Client) Services(ctx context.Context, filter map[string][]string) ([]Service, error) {
	return list[Service](ctx, c, "/services", filter)
}

// Service inspects the service with the given ID.
func (c *Client) Service(ctx context.Context, id string) (*Service, error) {
	return get[Service](ctx, c, "/services/"+url.PathEscape(id), url.Values{"insertDefaults": {"false"}})
}

// CreateService creates a service of spec, a ServiceSpec or a RawSpec,
// and returns its ID. A taken name is an error for which IsConflict holds.
func (c *Client) CreateService(ctx context.Context, spec any) (string, error) {
	var out struct{ ID string }
	if err := c.do(ctx, http.MethodPost, "/services/create", nil, spec, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// RemoveService removes a service; its tasks stop. A service that is
// already gone is an error for which IsNotFound holds.
func (c *Client) RemoveService(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/services/"+url.PathEscape(id), nil, nil, nil)
}

// UpdateServiceAt replaces the spec of service id, which must still be at
// version. When it is not, the error satisfies IsOutOfSequence.
func (c *Client) UpdateServiceAt(ctx context.Context, id string, version ObjectVersion, spec any) error {
	q := url.Values{"version": {fmt.Sprint(version.Index)}}
	return c.do(ctx, http.MethodPost, "/services/"+url.PathEscape(id)+"/update", q, spec, nil)
}

// ErrNoUpdate, returned by the change function of UpdateService, leaves the
// service as it is and makes UpdateService return nil.
var ErrNoUpdate = errors.New("no update needed")

// updateAttempts bounds how often UpdateService retries after another
// writer changed the service between its read and its write.
const updateAttempts = 8

// UpdateService reads service id, lets change edit its raw spec (change may
// also look at the service as read), and writes the spec back at the version
// it read. When somebody else updated the service in between, it reads it
// again and calls change again, so change must decide from what it is
// given, not from what it saw before.
func (c *Client) UpdateService(ctx context.Context, id string, change func(*Service, RawSpec) error) error {
	var err error
	for attempt := 0; attempt < updateAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
		}
		var svc *Service
		if svc, err = c.Service(ctx, id); err != nil {
			return err
		}
		var spec RawSpec
		if spec, err = svc.RawSpec(); err != nil {
			return err
		}
		if err = change(svc, spec); err != nil {
			if errors.Is(err, ErrNoUpdate) {
				return nil
			}
			return err
		}
		if err = c.UpdateServiceAt(ctx, id, svc.Version, spec); !IsOutOfSequence(err) {
			return err
		}
	}
	return fmt.Errorf("service %s kept changing under plug's update (%d attempts): %w", id, updateAttempts, err)
}
