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
	// AnnotationProtect, set to "true" on a Service by the cluster admin,
	// keeps plug from ever serving it: -s of its name is refused.
	AnnotationProtect = "plug.dev/protect"
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

// servedPort is one Service port answered by the holder on Target: a TCP
// port, or with UDP a UDP one (a Service may have both on one number).
type servedPort struct {
	Port   int  `json:"port"`
	Target int  `json:"target"`
	UDP    bool `json:"udp,omitempty"`
}

// key is the port and protocol sp serves.
func (sp servedPort) key() portKey { return portKey{Port: sp.Port, UDP: sp.UDP} }

// portKey is a Service port: its number and protocol.
type portKey struct {
	Port int
	UDP  bool
}

func keyOf(b tunnel.Binding) portKey { return portKey{Port: b.Port, UDP: b.UDP} }

// protocol is the Service port protocol of k.
func (k portKey) protocol() string {
	if k.UDP {
		return "UDP"
	}
	return "TCP"
}

func (k portKey) String() string { return fmt.Sprintf("%d/%s", k.Port, k.protocol()) }

func comparePortKeys(a, b portKey) int {
	if a.Port != b.Port {
		return a.Port - b.Port
	}
	switch {
	case a.UDP == b.UDP:
		return 0
	case a.UDP:
		return 1
	}
	return -1
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

// serving returns the target port for k, if the receipt serves it.
func (r receipt) serving(k portKey) (target int, ok bool) {
	for _, s := range r.Serves {
		if s.key() == k {
			return s.Target, true
		}
	}
	return 0, false
}

// withServed returns r serving k on target (replacing an older target).
func (r receipt) withServed(k portKey, target int) receipt {
	r.Serves = append(slices.DeleteFunc(slices.Clone(r.Serves), func(s servedPort) bool { return s.key() == k }),
		servedPort{Port: k.Port, Target: target, UDP: k.UDP})
	slices.SortFunc(r.Serves, func(a, b servedPort) int { return comparePortKeys(a.key(), b.key()) })
	return r
}

// without returns r no longer serving k (every port when k.Port is 0).
func (r receipt) without(k portKey) receipt {
	if k.Port == 0 {
		r.Serves = nil
		return r
	}
	r.Serves = slices.DeleteFunc(slices.Clone(r.Serves), func(s servedPort) bool { return s.key() == k })
	return r
}

// heartbeatOf is when svc's holder last renewed its heartbeat; the zero
// time when it never did or the value is unreadable.
func heartbeatOf(svc *k8sapi.Service) time.Time {
	t, _ := time.Parse(time.RFC3339, svc.Metadata.Annotations[AnnotationHeartbeat])
	return t
}

func heartbeatNow() string { return time.Now().UTC().Format(time.RFC3339) }
