package k8sapi

// Labels the EndpointSlice API gives meaning to.
const (
	// LabelServiceName ties an EndpointSlice to the Service it serves.
	LabelServiceName = "kubernetes.io/service-name"
	// LabelSliceManagedBy names the controller that writes an
	// EndpointSlice; each controller leaves the others' slices alone.
	LabelSliceManagedBy = "endpointslice.kubernetes.io/managed-by"
)

// EndpointSlice is a discovery.k8s.io/v1 EndpointSlice: some of the
// addresses behind a Service. kube-proxy merges every slice of a Service.
type EndpointSlice struct {
	TypeMeta
	Metadata    ObjectMeta     `json:"metadata"`
	AddressType string         `json:"addressType"` // "IPv4" or "IPv6"
	Endpoints   []Endpoint     `json:"endpoints"`
	Ports       []EndpointPort `json:"ports"`
}

// Endpoint is one address of an EndpointSlice.
type Endpoint struct {
	Addresses  []string           `json:"addresses"`
	Conditions EndpointConditions `json:"conditions"`
	TargetRef  *ObjectReference   `json:"targetRef,omitempty"`
	NodeName   string             `json:"nodeName,omitempty"`
}

// EndpointConditions says whether an endpoint takes traffic.
type EndpointConditions struct {
	Ready *bool `json:"ready,omitempty"`
}

// EndpointPort maps a Service port, by the Service port's name ("" for an
// unnamed one), to the port the endpoints listen on.
type EndpointPort struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol,omitempty"`
}
