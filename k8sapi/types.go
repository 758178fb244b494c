package k8sapi

// ObjectMeta is the metadata plug reads and writes on any object.
type ObjectMeta struct {
	Name            string `json:"name,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Generation counts the changes of the object's spec (workloads).
	Generation        int64             `json:"generation,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"` // RFC 3339, UTC: ordered as text
	DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
}

// OwnerReference ties an object's life to its owner's: the garbage
// collector deletes the object once the owner is gone.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller *bool  `json:"controller,omitempty"` // the owner is the object's managing controller
}

// ObjectReference points at one object, e.g. the pod behind an endpoint.
type ObjectReference struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	UID        string `json:"uid,omitempty"`
}

// TypeMeta names an object's kind in the bodies sent to the server.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ListMeta is the metadata of a list: its resourceVersion is where a watch
// of the same collection starts.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Continue        string `json:"continue,omitempty"`
}

// List is a collection of objects of one kind.
type List[T any] struct {
	Metadata ListMeta `json:"metadata"`
	Items    []T      `json:"items"`
}

// Preconditions make a delete apply only to the object version named.
type Preconditions struct {
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// deleteOptions is the body of a DELETE.
type deleteOptions struct {
	TypeMeta
	Preconditions     *Preconditions `json:"preconditions,omitempty"`
	PropagationPolicy string         `json:"propagationPolicy,omitempty"`
}
