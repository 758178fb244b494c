package kubeplatform

import (
	"context"
	"strconv"

	"plug/k8sapi"
	"plug/tunnel"
)

// AuditConfigMap is the name of slot i of the audit trail's ring
// (tunnel.AuditSlots): plug-audit-0 to plug-audit-3, in the agent's
// namespace, each holding JSON lines in the key "events".
func AuditConfigMap(i int) string { return "plug-audit-" + strconv.Itoa(i) }

// auditKey is the ConfigMap key holding a slot's lines.
const auditKey = "events"

// auditFeature is what the audit trail's rules are for.
const auditFeature = "the audit trail kept in the cluster (ConfigMaps plug-audit-0 to -3), read by plug ui across agent restarts"

// auditRules are the rights the ring needs: create cannot be limited to
// names in RBAC; get and update are, to the ring's ConfigMaps.
func auditRules() []rule {
	out := []rule{{"", "configmaps", "", []string{"create"}, auditFeature, false}}
	for i := range tunnel.AuditRingSlots {
		out = append(out, rule{"", "configmaps", AuditConfigMap(i), []string{"get", "update"}, auditFeature, false})
	}
	return out
}

func (p *Platform) configMaps() k8sapi.Resource[k8sapi.ConfigMap] {
	return k8sapi.Resources[k8sapi.ConfigMap](p.c, k8sapi.KindConfigMap, p.ns)
}

// ReadAuditSlot reads the ConfigMap of slot i; see tunnel.AuditSlots.
func (p *Platform) ReadAuditSlot(ctx context.Context, i int) ([]byte, string, error) {
	cm, err := p.configMaps().Get(ctx, AuditConfigMap(i))
	if k8sapi.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	return []byte(cm.Data[auditKey]), cm.Metadata.ResourceVersion, nil
}

// WriteAuditSlot creates the ConfigMap of slot i (version "") or
// replaces its lines when its resourceVersion is still version; see
// tunnel.AuditSlots.
func (p *Platform) WriteAuditSlot(ctx context.Context, i int, data []byte, version string) (string, error) {
	cm := &k8sapi.ConfigMap{
		TypeMeta: k8sapi.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		Metadata: k8sapi.ObjectMeta{Name: AuditConfigMap(i), ResourceVersion: version,
			Labels: map[string]string{"app.kubernetes.io/part-of": "plug", "app.kubernetes.io/component": "audit"}},
		Data: map[string]string{auditKey: string(data)},
	}
	var out *k8sapi.ConfigMap
	var err error
	if version == "" {
		out, err = p.configMaps().Create(ctx, cm)
	} else {
		out, err = p.configMaps().Update(ctx, cm.Metadata.Name, cm)
	}
	if k8sapi.IsConflict(err) || k8sapi.IsAlreadyExists(err) {
		return "", tunnel.ErrAuditConflict
	}
	if err != nil {
		return "", err
	}
	return out.Metadata.ResourceVersion, nil
}
