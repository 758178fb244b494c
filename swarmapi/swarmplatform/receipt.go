package swarmplatform

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// The labels plug puts on services, named as its annotations on
// Kubernetes. A relay carries its lease (holder, task, heartbeat) and what
// it forwards; a parked service carries its receipt.
// `docker service ls --filter label=plug.dev/relay` lists the relays,
// `--filter label=plug.dev/receipt` the parked services.
const (
	labelRelay     = "plug.dev/relay"     // relay: the name it serves
	labelProtect   = "plug.dev/protect"   // "true", set by the operator: never served
	labelHolder    = "plug.dev/holder"    // relay: the run holding the name (JSON)
	labelTask      = "plug.dev/task"      // relay: the holding agent's task ID
	labelHeartbeat = "plug.dev/heartbeat" // relay: the holder's last renewal (RFC 3339)
	labelPorts     = "plug.dev/ports"     // relay: "PORT:TARGET,..." it forwards
	labelParked    = "plug.dev/parked"    // relay: ID of the service parked for it
	labelReceipt   = "plug.dev/receipt"   // parked service: its receipt (JSON)
)

// lease is who holds a relay, and since when they last said so.
type lease struct {
	Holder    tunnel.Holder
	Task      string
	Heartbeat time.Time
}

// leaseOf reads a relay's lease from its labels. A label that does not
// parse reads as zero, which the sweep treats as stale.
func leaseOf(s *swarmapi.Service) lease {
	var l lease
	json.Unmarshal([]byte(s.Spec.Labels[labelHolder]), &l.Holder)
	l.Task = s.Spec.Labels[labelTask]
	l.Heartbeat, _ = time.Parse(time.RFC3339, s.Spec.Labels[labelHeartbeat])
	return l
}

// labels are the lease's labels.
func (l lease) labels() map[string]string {
	holder, _ := json.Marshal(l.Holder) // plain strings and a time always encode
	return map[string]string{
		labelHolder:    string(holder),
		labelTask:      l.Task,
		labelHeartbeat: l.Heartbeat.UTC().Format(time.RFC3339),
	}
}

// receipt is stored on a parked service: who parked it and for which
// name, and the original value of every field plug changed, to put back.
type receipt struct {
	Name   string        `json:"name"`   // the name served
	Relay  string        `json:"relay"`  // the relay service that took the name
	Holder tunnel.Holder `json:"holder"` // the run that holds it
	Task   string        `json:"task"`   // the holding agent's task ID
	Parked time.Time     `json:"parked"`
	// Awake says that plug has put the saved fields back for a while, the
	// receipt staying: the run holding the name is away, and the service's
	// tasks answer its callers meanwhile (away.go).
	Awake bool `json:"awake,omitempty"`
	// Saved maps the path of each changed spec field ("Mode",
	// "TaskTemplate/Placement") to its original JSON value; null means the
	// field was absent.
	Saved map[string]json.RawMessage `json:"saved"`
}

// receiptOf reads a service's receipt; ok is false when it has none.
func receiptOf(s *swarmapi.Service) (r receipt, ok bool, err error) {
	raw := s.Spec.Labels[labelReceipt]
	if raw == "" {
		return r, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return r, false, fmt.Errorf("service %s carries a %s label that is not plug's JSON (%v); restore the service by hand, then remove the label", s.Spec.Name, labelReceipt, err)
	}
	return r, true, nil
}

// label encodes the receipt as a label value.
func (r receipt) label() string {
	b, _ := json.Marshal(r) // strings, times and raw JSON always encode
	return string(b)
}

// relayPort is a port a relay forwards: a TCP port, or a UDP one.
type relayPort struct {
	Port int
	UDP  bool
}

// portOf is the port b asks to serve.
func portOf(b tunnel.Binding) relayPort { return relayPort{Port: b.Port, UDP: b.UDP} }

// String is the port as the plug.dev/ports label writes it: "8080", or
// "53/udp".
func (rp relayPort) String() string {
	if rp.UDP {
		return strconv.Itoa(rp.Port) + "/udp"
	}
	return strconv.Itoa(rp.Port)
}

// sortedPorts are the keys of ports, TCP first, each by number.
func sortedPorts(ports map[relayPort]int) []relayPort {
	return slices.SortedFunc(maps.Keys(ports), func(a, b relayPort) int {
		if a.UDP != b.UDP {
			if a.UDP {
				return 1
			}
			return -1
		}
		return a.Port - b.Port
	})
}

// formatPorts writes a relay's port map as its plug.dev/ports label,
// "8080:40001,53/udp:40002": each port callers use, and the agent's port
// it goes to.
func formatPorts(ports map[relayPort]int) string {
	parts := make([]string, 0, len(ports))
	for _, port := range sortedPorts(ports) {
		parts = append(parts, fmt.Sprintf("%s:%d", port, ports[port]))
	}
	return strings.Join(parts, ",")
}

// parsePorts reads a plug.dev/ports label; entries that do not parse are left out.
func parsePorts(s string) map[relayPort]int {
	ports := map[relayPort]int{}
	for _, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(part, ":")
		num, udp := strings.CutSuffix(a, "/udp")
		port, errA := strconv.Atoi(num)
		target, errB := strconv.Atoi(b)
		if ok && errA == nil && errB == nil {
			ports[relayPort{Port: port, UDP: udp}] = target
		}
	}
	return ports
}
