package swarmapitest

import (
	"net/http"

	"plug/swarmapi"
)

// SetVersion makes v the engine's answer to GET /version: the API versions
// it speaks are v.MinAPIVersion to v.APIVersion.
func (s *Server) SetVersion(v swarmapi.Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = v
}

// SetSwarm makes info the engine's place in its swarm, as GET /info tells
// it. Unless info.ControlAvailable, the node is no manager: every call on
// services, tasks and swarm networks is answered 503, as a worker's.
func (s *Server) SetSwarm(info swarmapi.SwarmInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.swarm = info
}

// AddNetwork creates the overlay network called name in the swarm
// (attachable, as plug's agent needs) and returns it.
func (s *Server) AddNetwork(name string, attachable bool) swarmapi.Network {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engine.addNetwork(swarmapi.Network{Name: name, Scope: "swarm", Driver: "overlay", Attachable: attachable})
}

// AddImage puts img into the engine's images, under each of its RepoTags:
// tasks of services running it start from now on. img.ID is made up when
// empty.
func (s *Server) AddImage(img swarmapi.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &s.engine
	if img.ID == "" {
		img.ID = "sha256:" + e.newID()
	}
	for _, tag := range img.RepoTags {
		e.images[tag] = img
	}
	e.orchestrate()
}

// EndTask ends the task id in state ("failed", "complete", "shutdown"),
// as when its container exits or is killed, with message. The swarm then
// starts another in its slot, unless the restart policy says "none".
func (s *Server) EndTask(id, state, message string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &s.engine
	t, _, aerr := e.task(id)
	if aerr != nil {
		return &swarmapi.Error{Method: http.MethodGet, Path: "/tasks/" + id, Status: aerr.status, Message: aerr.message}
	}
	task := t.(*swarmapi.Task)
	e.stop(task, state, "shutdown")
	task.Status.Message = message
	e.orchestrate()
	return nil
}

// Index is the swarm's store version: it moves on with every change of a
// service, a task or a network, and with nothing else.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engine.index
}
