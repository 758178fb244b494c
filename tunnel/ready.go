package tunnel

import "os"

// The agent's readiness, for a container runtime that asks (the
// Kubernetes readiness probe of deploy/plug-k8s.yaml runs `plug agent
// --ready`): Agent.ReadyFile, when set, exists exactly while the agent
// serves runs. It is removed when Serve starts (a file left by an earlier
// process of the same container means nothing), created once every right
// runs need is granted, and removed again when Serve stops.

// markReady creates or removes the ready file.
func (a *Agent) markReady(ready bool) {
	if a.ReadyFile == "" {
		return
	}
	var err error
	if ready {
		err = os.WriteFile(a.ReadyFile, []byte("serving runs\n"), 0o644)
	} else if err = os.Remove(a.ReadyFile); os.IsNotExist(err) {
		err = nil
	}
	if err != nil {
		a.logf("the readiness file %s: %v (the pod's readiness does not follow the agent's)", a.ReadyFile, err)
	}
}
