package k8sapi

import "encoding/json"

// Service is a core/v1 Service, reduced to the fields plug uses. Never send
// a Service decoded into this type back with Update: the fields it does not
// carry would be dropped. Change Services with MergePatch or JSONPatch.
type Service struct {
	TypeMeta
	Metadata ObjectMeta  `json:"metadata"`
	Spec     ServiceSpec `json:"spec"`
}

// Service types.
const (
	ServiceClusterIP    = "ClusterIP"
	ServiceExternalName = "ExternalName"
)

// ClusterIPNone is the clusterIP of a headless Service.
const ClusterIPNone = "None"

// ServiceSpec is the part of a Service's spec plug reads or writes.
type ServiceSpec struct {
	Type         string            `json:"type,omitempty"`
	ClusterIP    string            `json:"clusterIP,omitempty"`
	Selector     map[string]string `json:"selector,omitempty"`
	Ports        []ServicePort     `json:"ports,omitempty"`
	ExternalName string            `json:"externalName,omitempty"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name       string       `json:"name,omitempty"`
	Protocol   string       `json:"protocol,omitempty"`
	Port       int          `json:"port"`
	TargetPort *IntOrString `json:"targetPort,omitempty"`
	NodePort   int          `json:"nodePort,omitempty"`
}

// IntOrString is a port given by number or by a container port's name.
type IntOrString struct {
	Int    int
	String string // set when the value is a name
}

// MarshalJSON writes a number or a string.
func (v IntOrString) MarshalJSON() ([]byte, error) {
	if v.String != "" {
		return json.Marshal(v.String)
	}
	return json.Marshal(v.Int)
}

// UnmarshalJSON reads a number or a string.
func (v *IntOrString) UnmarshalJSON(b []byte) error {
	*v = IntOrString{}
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &v.String)
	}
	return json.Unmarshal(b, &v.Int)
}

// Endpoints is a core/v1 Endpoints object; plug only deletes the stale one
// a Service it takes over leaves behind.
type Endpoints struct {
	TypeMeta
	Metadata ObjectMeta `json:"metadata"`
}

// Pod is a core/v1 Pod, reduced to what plug reads.
type Pod struct {
	TypeMeta
	Metadata ObjectMeta `json:"metadata"`
	Spec     PodSpec    `json:"spec"`
	Status   PodStatus  `json:"status"`
}

// PodSpec is the part of a pod's spec plug reads.
type PodSpec struct {
	NodeName   string      `json:"nodeName,omitempty"`
	Containers []Container `json:"containers,omitempty"`
}

// Container is the part of a container plug reads: its named ports.
type Container struct {
	Name  string          `json:"name"`
	Ports []ContainerPort `json:"ports,omitempty"`
}

// ContainerPort is a port a container declares.
type ContainerPort struct {
	Name          string `json:"name,omitempty"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
}

// PodStatus is the part of a pod's status plug reads.
type PodStatus struct {
	Phase      string         `json:"phase,omitempty"`
	PodIP      string         `json:"podIP,omitempty"`
	Conditions []PodCondition `json:"conditions,omitempty"`
}

// PodCondition is one condition of a pod, e.g. Ready.
type PodCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// Ready reports whether the pod is Ready, has an address and is not being
// deleted: whether a Service's endpoints should list it as ready.
func (p *Pod) Ready() bool {
	if p.Status.PodIP == "" || p.Metadata.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// Secret is a core/v1 Secret. Data values are the decoded bytes.
type Secret struct {
	TypeMeta
	Metadata ObjectMeta        `json:"metadata"`
	Type     string            `json:"type,omitempty"`
	Data     map[string][]byte `json:"data,omitempty"`
}
