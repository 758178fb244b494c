package kubeplatform

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// The metadata plug writes. Everything plug changes on a Service it did not
// create is listed in the receipt, and removed with it.
const (
	// AnnotationReceipt holds the receipt (JSON) on a Service plug created
	// or took over.
	AnnotationReceipt = "plug.dev/receipt"
	// AnnotationHeartbeat holds when the holder last said it is alive
	// (RFC 3339, UTC).
	AnnotationHeartbeat = "plug.dev/heartbeat"
	// LabelManagedBy marks the Services plug created.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is plug's value of LabelManagedBy and of
	// k8sapi.LabelSliceManagedBy on its EndpointSlices.
	ManagedBy = "plug"
)

// receipt is what a Service plug changed carries: who holds it, what is
// served, and what to put back.
type receipt struct {
	Holder  holder       `json:"holder"`
	Pod     string       `json:"pod,omitempty"` // the agent pod holding it; "" outside a pod
	PodIP   string       `json:"podIP"`
	Created bool         `json:"created"` // plug created the Service: give back = delete
	Serves  []servedPort `json:"serves"`
	// Original is the taken-over Service as it was; nil when Created.
	Original *original `json:"original,omitempty"`
}

type holder struct {
	Run       string    `json:"run"`
	Agent     string    `json:"agent"`
	Developer string    `json:"developer"`
	User      string    `json:"user"`
	Since     time.Time `json:"since"`
}

func holderOf(h tunnel.Holder) holder {
	return holder{Run: h.Run, Agent: h.Agent, Developer: h.Developer, User: h.User, Since: h.Since.UTC()}
}

func (h holder) tunnel() tunnel.Holder {
	return tunnel.Holder{Run: h.Run, Agent: h.Agent, Developer: h.Developer, User: h.User, Since: h.Since}
}

// servedPort is one Service port answered by the holder on Target.
type servedPort struct {
	Port   int `json:"port"`
	Target int `json:"target"`
}

// original is what plug changes on a Service it takes over, as it was.
type original struct {
	Selector map[string]string    `json:"selector"`
	Ports    []k8sapi.ServicePort `json:"ports"`
}

// receiptOf reads the receipt of svc; ok is false when it has none.
func receiptOf(svc *k8sapi.Service) (r receipt, ok bool, err error) {
	raw, ok := svc.Metadata.Annotations[AnnotationReceipt]
	if !ok {
		return receipt{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return receipt{}, true, fmt.Errorf("the %s annotation of Service %s is not a receipt plug can read: %w", AnnotationReceipt, svc.Metadata.Name, err)
	}
	return r, true, nil
}

func (r receipt) encode() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a receipt always encodes
	}
	return string(b)
}

// serving returns the target port for port, if the receipt serves it.
func (r receipt) serving(port int) (target int, ok bool) {
	for _, s := range r.Serves {
		if s.Port == port {
			return s.Target, true
		}
	}
	return 0, false
}

// withServed returns r serving port on target (replacing an older target).
func (r receipt) withServed(port, target int) receipt {
	r.Serves = append(slices.DeleteFunc(slices.Clone(r.Serves), func(s servedPort) bool { return s.Port == port }),
		servedPort{Port: port, Target: target})
	slices.SortFunc(r.Serves, func(a, b servedPort) int { return a.Port - b.Port })
	return r
}

// without returns r no longer serving port (every port when port is 0).
func (r receipt) without(port int) receipt {
	if port == 0 {
		r.Serves = nil
		return r
	}
	r.Serves = slices.DeleteFunc(slices.Clone(r.Serves), func(s servedPort) bool { return s.Port == port })
	return r
}

// heartbeatOf is when svc's holder last renewed its heartbeat; the zero
// time when it never did or the value is unreadable.
func heartbeatOf(svc *k8sapi.Service) time.Time {
	t, _ := time.Parse(time.RFC3339, svc.Metadata.Annotations[AnnotationHeartbeat])
	return t
}

func heartbeatNow() string { return time.Now().UTC().Format(time.RFC3339) }
