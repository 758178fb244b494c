package k8sapi

import (
	"sort"
	"strings"
)

// EnvVar is one entry of a container's env: a value, or where it comes from.
type EnvVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value,omitempty"`
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource says where an env entry's value comes from; one field is set.
type EnvVarSource struct {
	FieldRef         *ObjectFieldSelector   `json:"fieldRef,omitempty"`
	ResourceFieldRef *ResourceFieldSelector `json:"resourceFieldRef,omitempty"`
	ConfigMapKeyRef  *KeySelector           `json:"configMapKeyRef,omitempty"`
	SecretKeyRef     *KeySelector           `json:"secretKeyRef,omitempty"`
	FileKeyRef       *FileKeySelector       `json:"fileKeyRef,omitempty"`
}

// ObjectFieldSelector is a field of the pod (the downward API).
type ObjectFieldSelector struct {
	APIVersion string `json:"apiVersion,omitempty"`
	FieldPath  string `json:"fieldPath"`
}

// ResourceFieldSelector is a resource of a container, in units of Divisor
// (a quantity; "" means 1).
type ResourceFieldSelector struct {
	ContainerName string `json:"containerName,omitempty"`
	Resource      string `json:"resource"`
	Divisor       string `json:"divisor,omitempty"`
}

// KeySelector is one key of a ConfigMap or a Secret.
type KeySelector struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Optional *bool  `json:"optional,omitempty"`
}

// FileKeySelector is one key of an env file in a volume of the pod.
type FileKeySelector struct {
	VolumeName string `json:"volumeName"`
	Path       string `json:"path"`
	Key        string `json:"key"`
	Optional   *bool  `json:"optional,omitempty"`
}

// EnvFromSource imports every key of a ConfigMap or a Secret.
type EnvFromSource struct {
	Prefix       string     `json:"prefix,omitempty"`
	ConfigMapRef *EnvFromOf `json:"configMapRef,omitempty"`
	SecretRef    *EnvFromOf `json:"secretRef,omitempty"`
}

// EnvFromOf names the ConfigMap or Secret of an EnvFromSource.
type EnvFromOf struct {
	Name     string `json:"name"`
	Optional *bool  `json:"optional,omitempty"`
}

// IsOptional reports whether a *bool "optional" field is set and true.
func IsOptional(b *bool) bool { return b != nil && *b }

// ResourceRequirements are a container's (or pod's) requests and limits,
// each a quantity as the API server wrote it, e.g. "500m", "128Mi".
type ResourceRequirements struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

// Workload is a Deployment, StatefulSet, DaemonSet or Job, reduced to how
// it finds its pods and the template it makes them from.
type Workload struct {
	TypeMeta
	Metadata ObjectMeta   `json:"metadata"`
	Spec     WorkloadSpec `json:"spec"`
}

// WorkloadSpec is the part of a workload's spec plug reads.
type WorkloadSpec struct {
	Selector *LabelSelector  `json:"selector,omitempty"`
	Template PodTemplateSpec `json:"template"`
}

// PodTemplateSpec is the pod a workload makes.
type PodTemplateSpec struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     PodSpec    `json:"spec"`
}

// LabelSelector selects objects by their labels.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is one expression of a LabelSelector.
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"` // In, NotIn, Exists, DoesNotExist
	Values   []string `json:"values,omitempty"`
}

// String is the selector in the syntax of ListOptions.LabelSelector, its
// requirements sorted. An empty selector selects everything ("").
func (s *LabelSelector) String() string {
	if s == nil {
		return ""
	}
	var parts []string
	for k, v := range s.MatchLabels {
		parts = append(parts, k+"="+v)
	}
	for _, r := range s.MatchExpressions {
		values := append([]string(nil), r.Values...)
		sort.Strings(values)
		switch r.Operator {
		case "In":
			parts = append(parts, r.Key+" in ("+strings.Join(values, ",")+")")
		case "NotIn":
			parts = append(parts, r.Key+" notin ("+strings.Join(values, ",")+")")
		case "Exists":
			parts = append(parts, r.Key)
		case "DoesNotExist":
			parts = append(parts, "!"+r.Key)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// The workload kinds plug reads.
var (
	KindDeployment  = Kind{"apps", "v1", "deployments", "Deployment"}
	KindStatefulSet = Kind{"apps", "v1", "statefulsets", "StatefulSet"}
	KindDaemonSet   = Kind{"apps", "v1", "daemonsets", "DaemonSet"}
	KindJob         = Kind{"batch", "v1", "jobs", "Job"}
)

// Deployment is an apps/v1 Deployment, reduced to what moving it to
// another image and following the rollout read.
type Deployment struct {
	TypeMeta
	Metadata ObjectMeta       `json:"metadata"`
	Spec     DeploymentSpec   `json:"spec"`
	Status   DeploymentStatus `json:"status"`
}

// DeploymentSpec is the part of a Deployment's spec plug reads.
type DeploymentSpec struct {
	Replicas *int32          `json:"replicas,omitempty"` // nil: 1
	Selector *LabelSelector  `json:"selector,omitempty"`
	Template PodTemplateSpec `json:"template"`
	Strategy struct {
		Type string `json:"type,omitempty"` // RollingUpdate (the default) or Recreate
	} `json:"strategy,omitzero"`
}

// DeploymentStatus is how far the Deployment controller got.
type DeploymentStatus struct {
	// ObservedGeneration is the generation the controller acted on last.
	ObservedGeneration int64          `json:"observedGeneration,omitempty"`
	Replicas           int32          `json:"replicas,omitempty"`
	UpdatedReplicas    int32          `json:"updatedReplicas,omitempty"`
	ReadyReplicas      int32          `json:"readyReplicas,omitempty"`
	AvailableReplicas  int32          `json:"availableReplicas,omitempty"`
	Conditions         []PodCondition `json:"conditions,omitempty"`
}

// Deployments are the namespace's Deployments.
func (c *Client) Deployments(ns string) Resource[Deployment] {
	return Resources[Deployment](c, KindDeployment, ns)
}
