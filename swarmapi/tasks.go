package swarmapi

import (
	"context"
	"net/url"
	"time"
)

// Task is one scheduled instance of a service.
type Task struct {
	ID                  string
	ServiceID           string
	NodeID              string
	Slot                int
	Spec                TaskSpec
	Status              TaskStatus
	DesiredState        string
	NetworksAttachments []NetworkAttachment
}

// TaskStatus is where a task is in its life.
type TaskStatus struct {
	Timestamp       time.Time
	State           string // "new" ... "running", "complete", "shutdown", "failed", "rejected", ...
	Message         string
	Err             string
	ContainerStatus *ContainerStatus
}

// ContainerStatus is the container behind a task.
type ContainerStatus struct {
	ContainerID string
	PID         int
	ExitCode    int
}

// NetworkAttachment is a task's place on one network.
type NetworkAttachment struct {
	Network   SwarmNetwork
	Addresses []string // CIDR, e.g. "10.0.1.5/24"
}

// SwarmNetwork is a network as the swarm describes it.
type SwarmNetwork struct {
	ID   string
	Spec struct {
		Name       string
		Attachable bool
		Ingress    bool
	}
}

// Running reports whether the task's container runs and is meant to.
func (t *Task) Running() bool {
	return t.Status.State == "running" && t.DesiredState == "running"
}

// Ended reports whether the task is done for good: it exited, was stopped,
// failed or was refused, and the swarm will not start it again.
func (t *Task) Ended() bool {
	switch t.Status.State {
	case "complete", "shutdown", "failed", "rejected", "orphaned", "remove":
		return true
	}
	return false
}

// Tasks lists the tasks matching filter ("service", "desired-state",
// "node", "label", "id", "name").
func (c *Client) Tasks(ctx context.Context, filter map[string][]string) ([]Task, error) {
	return list[Task](ctx, c, "/tasks", filter)
}

// Task inspects the task with the given ID.
func (c *Client) Task(ctx context.Context, id string) (*Task, error) {
	return get[Task](ctx, c, "/tasks/"+url.PathEscape(id), nil)
}
