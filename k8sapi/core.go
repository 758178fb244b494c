package k8sapi

import (
	"encoding/json"
	"time"
)

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
	NodeName           string      `json:"nodeName,omitempty"`
	ServiceAccountName string      `json:"serviceAccountName,omitempty"`
	EnableServiceLinks *bool       `json:"enableServiceLinks,omitempty"`
	InitContainers     []Container `json:"initContainers,omitempty"`
	Containers         []Container `json:"containers,omitempty"`
	// Resources are the pod-level resources, when the pod sets them.
	Resources       *ResourceRequirements `json:"resources,omitempty"`
	SecurityContext *PodSecurityContext   `json:"securityContext,omitempty"`
	Volumes         []Volume              `json:"volumes,omitempty"`
}

// PodSecurityContext is the part of a pod's securityContext plug reads:
// who its processes run as, and the group its volumes are given to.
type PodSecurityContext struct {
	RunAsUser           *int64  `json:"runAsUser,omitempty"`
	RunAsGroup          *int64  `json:"runAsGroup,omitempty"`
	FSGroup             *int64  `json:"fsGroup,omitempty"`
	FSGroupChangePolicy string  `json:"fsGroupChangePolicy,omitempty"`
	SupplementalGroups  []int64 `json:"supplementalGroups,omitempty"`
}

// SecurityContext is the part of a container's securityContext plug
// reads.
type SecurityContext struct {
	RunAsUser  *int64 `json:"runAsUser,omitempty"`
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`
}

// Volume is one volume of a pod spec: its name, and its source kept as
// the API server wrote it (one key, e.g. "persistentVolumeClaim", and its
// value), so that another pod can mount the very same source.
type Volume struct {
	Name   string
	Source map[string]json.RawMessage
}

// MarshalJSON writes the volume as the API has it: "name" beside the
// source's key.
func (v Volume) MarshalJSON() ([]byte, error) {
	m := make(map[string]json.RawMessage, len(v.Source)+1)
	for k, raw := range v.Source {
		m[k] = raw
	}
	name, err := json.Marshal(v.Name)
	if err != nil {
		return nil, err
	}
	m["name"] = name
	return json.Marshal(m)
}

// UnmarshalJSON reads a volume of a pod spec.
func (v *Volume) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	v.Name = ""
	if raw, ok := m["name"]; ok {
		if err := json.Unmarshal(raw, &v.Name); err != nil {
			return err
		}
		delete(m, "name")
	}
	v.Source = m
	return nil
}

// VolumeMount is where a container mounts one of its pod's volumes.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	SubPath   string `json:"subPath,omitempty"`
}

// PersistentVolumeClaim is a core/v1 PersistentVolumeClaim, reduced to how
// it may be mounted.
type PersistentVolumeClaim struct {
	TypeMeta
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		AccessModes      []string `json:"accessModes,omitempty"`
		StorageClassName *string  `json:"storageClassName,omitempty"`
		VolumeName       string   `json:"volumeName,omitempty"`
	} `json:"spec"`
	Status struct {
		Phase       string   `json:"phase,omitempty"`
		AccessModes []string `json:"accessModes,omitempty"`
	} `json:"status"`
}

// Container is the part of a container plug reads: its named ports and
// what makes its environment.
type Container struct {
	Name      string               `json:"name"`
	Image     string               `json:"image,omitempty"`
	Ports     []ContainerPort      `json:"ports,omitempty"`
	Env       []EnvVar             `json:"env,omitempty"`
	EnvFrom   []EnvFromSource      `json:"envFrom,omitempty"`
	Resources ResourceRequirements `json:"resources,omitzero"`
	// SecurityContext and VolumeMounts say who it runs as and what it
	// mounts where (plug --volume).
	SecurityContext *SecurityContext `json:"securityContext,omitempty"`
	VolumeMounts    []VolumeMount    `json:"volumeMounts,omitempty"`
}

// ContainerPort is a port a container declares.
type ContainerPort struct {
	Name          string `json:"name,omitempty"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
}

// PodStatus is the part of a pod's status plug reads.
type PodStatus struct {
	Phase             string            `json:"phase,omitempty"`
	PodIP             string            `json:"podIP,omitempty"`
	PodIPs            []IPAddress       `json:"podIPs,omitempty"`
	HostIP            string            `json:"hostIP,omitempty"`
	HostIPs           []IPAddress       `json:"hostIPs,omitempty"`
	Conditions        []PodCondition    `json:"conditions,omitempty"`
	ContainerStatuses []ContainerStatus `json:"containerStatuses,omitempty"`
	// InitContainerStatuses include those of sidecars (init containers
	// that keep running).
	InitContainerStatuses []ContainerStatus `json:"initContainerStatuses,omitempty"`
}

// IPAddress is one address of a pod or of its node, in a pod's status.
type IPAddress struct {
	IP string `json:"ip"`
}

// ContainerStatus is what a pod's status says of one of its containers.
type ContainerStatus struct {
	Name  string         `json:"name"`
	Ready bool           `json:"ready"`
	State ContainerState `json:"state,omitzero"`
	// RestartCount is how often the kubelet restarted the container.
	RestartCount int `json:"restartCount,omitempty"`
}

// ContainerState says whether a container runs; plug reads only that.
type ContainerState struct {
	Running *struct {
		StartedAt string `json:"startedAt,omitempty"`
	} `json:"running,omitempty"`
	// Waiting and Terminated say why a container does not run.
	Waiting    *ContainerReason `json:"waiting,omitempty"`
	Terminated *ContainerReason `json:"terminated,omitempty"`
}

// ContainerReason is why a container waits or ended.
type ContainerReason struct {
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
}

// PodCondition is one condition of a pod, e.g. Ready.
type PodCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
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

// ObjectEvent is a core/v1 Event: something that happened to an object,
// shown by kubectl describe. (Not to be confused with a watch's Event.)
type ObjectEvent struct {
	TypeMeta
	Metadata       ObjectMeta      `json:"metadata"`
	InvolvedObject ObjectReference `json:"involvedObject"`
	Reason         string          `json:"reason"`  // one CamelCase word, e.g. "PlugTakeover"
	Message        string          `json:"message"` // one line for people
	Type           string          `json:"type"`    // "Normal" or "Warning"
	FirstTimestamp string          `json:"firstTimestamp,omitempty"`
	LastTimestamp  string          `json:"lastTimestamp,omitempty"`
	Count          int             `json:"count,omitempty"`
	Source         EventSource     `json:"source,omitempty"`
	// ReportingComponent and ReportingInstance say who wrote it.
	ReportingComponent string `json:"reportingComponent,omitempty"`
	ReportingInstance  string `json:"reportingInstance,omitempty"`
}

// EventSource names the writer of an ObjectEvent for older readers.
type EventSource struct {
	Component string `json:"component,omitempty"`
	Host      string `json:"host,omitempty"`
}

// ConfigMap is a core/v1 ConfigMap.
type ConfigMap struct {
	TypeMeta
	Metadata ObjectMeta        `json:"metadata"`
	Data     map[string]string `json:"data,omitempty"`
}

// Lease is a coordination.k8s.io/v1 Lease: an object its holder renews,
// so that others can tell whether the holder is alive.
type Lease struct {
	TypeMeta
	Metadata ObjectMeta `json:"metadata"`
	Spec     LeaseSpec  `json:"spec"`
}

// LeaseSpec says who holds a Lease and when they last renewed it.
type LeaseSpec struct {
	HolderIdentity       string     `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds int        `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          *MicroTime `json:"acquireTime,omitempty"`
	RenewTime            *MicroTime `json:"renewTime,omitempty"`
}

// MicroTime is a time as the API writes a Lease's: RFC 3339 with
// microseconds.
type MicroTime struct{ time.Time }

// microTimeLayout is the API's layout of a MicroTime.
const microTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// NewMicroTime returns t as a MicroTime, in UTC.
func NewMicroTime(t time.Time) *MicroTime { return &MicroTime{t.UTC()} }

// MarshalJSON writes the time in the API's layout.
func (t MicroTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format(microTimeLayout))
}

// UnmarshalJSON reads a time in RFC 3339, with or without fractions.
func (t *MicroTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = parsed
	return nil
}
