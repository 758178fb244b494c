package k8sapi

import (
	"context"
	"net/http"
)

// ResourceAttributes is an action on a resource, as RBAC sees it.
type ResourceAttributes struct {
	Namespace   string `json:"namespace,omitempty"`
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

type selfSubjectAccessReview struct {
	TypeMeta
	Spec struct {
		ResourceAttributes ResourceAttributes `json:"resourceAttributes"`
	} `json:"spec"`
	Status struct {
		Allowed bool   `json:"allowed"`
		Denied  bool   `json:"denied,omitempty"`
		Reason  string `json:"reason,omitempty"`
	} `json:"status"`
}

// CanI asks the API server whether the caller may perform a (a
// SelfSubjectAccessReview, which every authenticated caller may create).
func (c *Client) CanI(ctx context.Context, a ResourceAttributes) (bool, error) {
	var review selfSubjectAccessReview
	review.APIVersion, review.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
	review.Spec.ResourceAttributes = a
	err := c.do(ctx, request{
		method: http.MethodPost,
		path:   "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
		body:   review,
	}, &review)
	return review.Status.Allowed, err
}
