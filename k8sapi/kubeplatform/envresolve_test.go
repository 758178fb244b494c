package kubeplatform

import (
	"context"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"plug/k8sapi"
)

// fakeEnvReader serves ConfigMaps and Secrets from maps; names in
// forbidden answer Forbidden, as to an agent without the right.
type fakeEnvReader struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string]string
	forbidden  map[string]bool // "ConfigMap/NAME" or "Secret/NAME"
	reads      map[string]int
}

func (f *fakeEnvReader) answer(kind, name string, exists bool) error {
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	f.reads[kind+"/"+name]++
	switch {
	case f.forbidden[kind+"/"+name]:
		return &k8sapi.APIError{Code: http.StatusForbidden, Reason: k8sapi.ReasonForbidden}
	case !exists:
		return &k8sapi.APIError{Code: http.StatusNotFound, Reason: k8sapi.ReasonNotFound}
	}
	return nil
}

func (f *fakeEnvReader) configMap(_ context.Context, name string) (*k8sapi.ConfigMap, error) {
	data, ok := f.configMaps[name]
	if err := f.answer("ConfigMap", name, ok); err != nil {
		return nil, err
	}
	return &k8sapi.ConfigMap{Data: data}, nil
}

func (f *fakeEnvReader) secret(_ context.Context, name string) (*k8sapi.Secret, error) {
	data, ok := f.secrets[name]
	if err := f.answer("Secret", name, ok); err != nil {
		return nil, err
	}
	s := &k8sapi.Secret{Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s, nil
}

var yes = func() *bool { b := true; return &b }()

func value(name, v string) k8sapi.EnvVar { return k8sapi.EnvVar{Name: name, Value: v} }

func from(name string, src k8sapi.EnvVarSource) k8sapi.EnvVar {
	return k8sapi.EnvVar{Name: name, ValueFrom: &src}
}

func fieldRef(path string) k8sapi.EnvVarSource {
	return k8sapi.EnvVarSource{FieldRef: &k8sapi.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
}

func resourceRef(resource, divisor string) k8sapi.EnvVarSource {
	return k8sapi.EnvVarSource{ResourceFieldRef: &k8sapi.ResourceFieldSelector{Resource: resource, Divisor: divisor}}
}

func cmKey(name, key string, optional bool) k8sapi.EnvVarSource {
	ref := &k8sapi.KeySelector{Name: name, Key: key}
	if optional {
		ref.Optional = yes
	}
	return k8sapi.EnvVarSource{ConfigMapKeyRef: ref}
}

func secretKey(name, key string, optional bool) k8sapi.EnvVarSource {
	ref := &k8sapi.KeySelector{Name: name, Key: key}
	if optional {
		ref.Optional = yes
	}
	return k8sapi.EnvVarSource{SecretKeyRef: ref}
}

func runningPod() envPod {
	return envPod{pod: &k8sapi.Pod{
		Metadata: k8sapi.ObjectMeta{
			Name: "web-7d4b9-x2x9q", Namespace: "shop", UID: "0d1f2c3b-1111-2222-3333-444455556666",
			Labels:      map[string]string{"app": "web", "pod-template-hash": "7d4b9"},
			Annotations: map[string]string{"team": "a"},
		},
		Spec: k8sapi.PodSpec{NodeName: "node-1", ServiceAccountName: "web-sa"},
		Status: k8sapi.PodStatus{
			Phase: "Running", PodIP: "10.0.0.7", PodIPs: []k8sapi.IPAddress{{IP: "10.0.0.7"}, {IP: "fd00::7"}},
			HostIP: "192.0.2.1", HostIPs: []k8sapi.IPAddress{{IP: "192.0.2.1"}},
		},
	}}
}

func resolve(t *testing.T, r envReader, p envPod, c k8sapi.Container, services map[string]string) *containerEnv {
	t.Helper()
	env, err := resolveEnv(context.Background(), r, p, &c, services)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestResolveEnvValuesAndExpansion(t *testing.T) {
	services := map[string]string{"DB_SERVICE_HOST": "10.96.0.9", "DB_SERVICE_PORT": "5432", "SHADOWED": "from-services"}
	c := k8sapi.Container{Name: "app", Env: []k8sapi.EnvVar{
		value("HOST", "db.example"),
		value("URL", "postgres://$(HOST):$(DB_SERVICE_PORT)/$(NAME)"), // NAME comes later: literal
		value("NAME", "shop"),
		value("CHAIN", "$(URL)?x=$(NAME)"),
		value("ESCAPED", "$$(HOST) and $$$(HOST) and $$"),
		value("UNDEFINED", "$(NOPE)"),
		value("EMPTY", ""),
		value("SHADOWED", "from-env"),
		value("SELF", "$(SELF)+1"), // no SELF yet: literal
		value("HOST", "$(HOST).internal"),
	}}
	env := resolve(t, &fakeEnvReader{}, runningPod(), c, services)
	want := map[string]string{
		"DB_SERVICE_HOST": "10.96.0.9",
		"DB_SERVICE_PORT": "5432",
		"HOST":            "db.example.internal",
		"URL":             "postgres://db.example:5432/$(NAME)",
		"NAME":            "shop",
		"CHAIN":           "postgres://db.example:5432/$(NAME)?x=shop",
		"ESCAPED":         "$(HOST) and $db.example and $",
		"UNDEFINED":       "$(NOPE)",
		"EMPTY":           "",
		"SHADOWED":        "from-env",
		"SELF":            "$(SELF)+1",
	}
	if !reflect.DeepEqual(env.vars, want) {
		t.Errorf("vars:\n got %v\nwant %v", env.vars, want)
	}
	if len(env.gaps) != 0 || len(env.unread) != 0 {
		t.Errorf("gaps %v, unread %v", env.gaps, env.unread)
	}
}

func TestResolveEnvFromAndPrecedence(t *testing.T) {
	r := &fakeEnvReader{
		configMaps: map[string]map[string]string{
			"base":  {"LEVEL": "info", "MODE": "base", "COLOR": "blue"},
			"extra": {"MODE": "extra", "KEY": "cm-key"},
		},
		secrets: map[string]map[string]string{
			"creds": {"USER": "admin", "PASSWORD": "s3cr3t\nline2"},
		},
	}
	c := k8sapi.Container{
		EnvFrom: []k8sapi.EnvFromSource{
			{ConfigMapRef: &k8sapi.EnvFromOf{Name: "base"}},
			{ConfigMapRef: &k8sapi.EnvFromOf{Name: "extra"}},                 // replaces MODE
			{ConfigMapRef: &k8sapi.EnvFromOf{Name: "absent", Optional: yes}}, // skipped
			{Prefix: "DB_", SecretRef: &k8sapi.EnvFromOf{Name: "creds"}},
			{Prefix: "X_", ConfigMapRef: &k8sapi.EnvFromOf{Name: "base"}}, // read once
		},
		Env: []k8sapi.EnvVar{
			value("COLOR", "red-$(LEVEL)"),              // env replaces envFrom, sees it
			from("KEY", cmKey("extra", "absent", true)), // optional missing key: KEY stays cm-key
			from("GONE", cmKey("nowhere", "k", true)),   // optional missing ConfigMap: not set
			from("PW", secretKey("creds", "PASSWORD", false)),
			from("MISSING", secretKey("creds", "nope", true)),
			value("DSN", "$(DB_USER):$(PW)@$(X_MODE)"),
		},
	}
	env := resolve(t, r, runningPod(), c, nil)
	want := map[string]string{
		"LEVEL": "info", "MODE": "extra", "COLOR": "red-info", "KEY": "cm-key",
		"DB_USER": "admin", "DB_PASSWORD": "s3cr3t\nline2",
		"X_LEVEL": "info", "X_MODE": "base", "X_COLOR": "blue",
		"PW": "s3cr3t\nline2", "DSN": "admin:s3cr3t\nline2@base",
	}
	if !reflect.DeepEqual(env.vars, want) {
		t.Errorf("vars:\n got %v\nwant %v", env.vars, want)
	}
	if r.reads["ConfigMap/base"] != 1 || r.reads["Secret/creds"] != 1 {
		t.Errorf("each source is read once, as the kubelet does: %v", r.reads)
	}
}

func TestResolveEnvRefusesWhatTheKubeletRefuses(t *testing.T) {
	r := &fakeEnvReader{configMaps: map[string]map[string]string{"cfg": {"a": "1"}}}
	for _, c := range []k8sapi.Container{
		{EnvFrom: []k8sapi.EnvFromSource{{ConfigMapRef: &k8sapi.EnvFromOf{Name: "absent"}}}},
		{EnvFrom: []k8sapi.EnvFromSource{{SecretRef: &k8sapi.EnvFromOf{Name: "absent"}}}},
		{Env: []k8sapi.EnvVar{from("A", cmKey("absent", "a", false))}},
		{Env: []k8sapi.EnvVar{from("A", cmKey("cfg", "nope", false))}},
		{Env: []k8sapi.EnvVar{from("A", secretKey("absent", "a", false))}},
		{Env: []k8sapi.EnvVar{from("A", fieldRef("status.phase"))}},
		{Env: []k8sapi.EnvVar{from("A", resourceRef("limits.gpu", ""))}},
	} {
		if _, err := resolveEnv(context.Background(), r, runningPod(), &c, nil); err == nil {
			t.Errorf("%+v: resolved, want the kubelet's refusal", c)
		} else if !strings.Contains(err.Error(), "absent") && !strings.Contains(err.Error(), "nope") && !strings.Contains(err.Error(), "status.phase") && !strings.Contains(err.Error(), "limits.gpu") {
			t.Errorf("the refusal does not name what is wrong: %v", err)
		}
	}
}

func TestResolveEnvDownwardAPI(t *testing.T) {
	c := k8sapi.Container{Env: []k8sapi.EnvVar{
		from("POD", fieldRef("metadata.name")),
		from("NS", fieldRef("metadata.namespace")),
		from("UID", fieldRef("metadata.uid")),
		from("APP", fieldRef("metadata.labels['app']")),
		from("HASH", fieldRef("metadata.labels['pod-template-hash']")),
		from("NOLABEL", fieldRef("metadata.labels['nope']")),
		from("TEAM", fieldRef("metadata.annotations['team']")),
		from("NODE", fieldRef("spec.nodeName")),
		from("SA", fieldRef("spec.serviceAccountName")),
		from("IP", fieldRef("status.podIP")),
		from("IPS", fieldRef("status.podIPs")),
		from("HOST", fieldRef("status.hostIP")),
		from("HOSTS", fieldRef("status.hostIPs")),
		value("WHERE", "$(POD)@$(NODE)"),
	}}
	env := resolve(t, &fakeEnvReader{}, runningPod(), c, nil)
	want := map[string]string{
		"POD": "web-7d4b9-x2x9q", "NS": "shop", "UID": "0d1f2c3b-1111-2222-3333-444455556666",
		"APP": "web", "HASH": "7d4b9", "NOLABEL": "", "TEAM": "a", "NODE": "node-1", "SA": "web-sa",
		"IP": "10.0.0.7", "IPS": "10.0.0.7,fd00::7", "HOST": "192.0.2.1", "HOSTS": "192.0.2.1",
		"WHERE": "web-7d4b9-x2x9q@node-1",
	}
	if !reflect.DeepEqual(env.vars, want) {
		t.Errorf("vars:\n got %v\nwant %v", env.vars, want)
	}

	// Without a running pod, the template knows its labels, namespace and
	// service account; the rest is a gap, and so is what refers to it.
	tmpl := envPod{pod: &k8sapi.Pod{
		Metadata: k8sapi.ObjectMeta{Namespace: "shop", Labels: map[string]string{"app": "web"}},
	}, fromTemplate: true}
	env = resolve(t, &fakeEnvReader{}, tmpl, c, nil)
	want = map[string]string{"NS": "shop", "APP": "web", "SA": "default"}
	if !reflect.DeepEqual(env.vars, want) {
		t.Errorf("from the template:\n got %v\nwant %v", env.vars, want)
	}
	for _, name := range []string{"POD", "UID", "HASH", "NOLABEL", "TEAM", "NODE", "IP", "IPS", "HOST", "HOSTS", "WHERE"} {
		g, ok := env.gaps[name]
		if !ok || g.rule != "" {
			t.Errorf("from the template, %s is not a gap without a rule: %+v", name, g)
		}
	}
	if !strings.Contains(env.gaps["WHERE"].why, "$(POD)") {
		t.Errorf("WHERE's gap does not say it refers to POD: %q", env.gaps["WHERE"].why)
	}
}

func TestResolveEnvResources(t *testing.T) {
	p := runningPod()
	p.pod.Spec.Containers = []k8sapi.Container{
		{Name: "app"},
		{Name: "side", Resources: k8sapi.ResourceRequirements{Limits: map[string]string{"memory": "64Mi"}}},
	}
	c := k8sapi.Container{
		Name: "app",
		Resources: k8sapi.ResourceRequirements{
			Requests: map[string]string{"cpu": "250m", "memory": "100M"},
			Limits:   map[string]string{"cpu": "1500m", "memory": "256Mi", "ephemeral-storage": "0", "hugepages-2Mi": "4Mi"},
		},
		Env: []k8sapi.EnvVar{
			from("CPU_REQ", resourceRef("requests.cpu", "")),
			from("CPU_REQ_M", resourceRef("requests.cpu", "1m")),
			from("CPU_LIM", resourceRef("limits.cpu", "0")), // no divisor, as the API server stores it
			from("MEM_REQ_MI", resourceRef("requests.memory", "1Mi")),
			from("MEM_LIM", resourceRef("limits.memory", "")),
			from("MEM_LIM_MI", resourceRef("limits.memory", "1Mi")),
			from("EPH_REQ", resourceRef("requests.ephemeral-storage", "")),
			from("EPH_LIM", resourceRef("limits.ephemeral-storage", "")), // zero: the node's allocatable
			from("HUGE", resourceRef("limits.hugepages-2Mi", "1Mi")),
			from("HUGE_REQ", resourceRef("requests.hugepages-2Mi", "")),
			{Name: "SIDE_MEM", ValueFrom: &k8sapi.EnvVarSource{ResourceFieldRef: &k8sapi.ResourceFieldSelector{ContainerName: "side", Resource: "limits.memory", Divisor: "1Mi"}}},
		},
	}
	env := resolve(t, &fakeEnvReader{}, p, c, nil)
	want := map[string]string{
		"CPU_REQ": "1", "CPU_REQ_M": "250", "CPU_LIM": "2", "MEM_REQ_MI": "96",
		"MEM_LIM": "268435456", "MEM_LIM_MI": "256", "EPH_REQ": "0", "HUGE": "4", "HUGE_REQ": "0", "SIDE_MEM": "64",
	}
	if !reflect.DeepEqual(env.vars, want) {
		t.Errorf("vars:\n got %v\nwant %v", env.vars, want)
	}
	if g, ok := env.gaps["EPH_LIM"]; !ok || !strings.Contains(g.why, "allocatable") {
		t.Errorf("an unset limit is not a gap naming the node's allocatable: %+v", env.gaps)
	}

	// A pod-level limit stands in for the container's unset one.
	p.pod.Spec.Resources = &k8sapi.ResourceRequirements{Limits: map[string]string{"ephemeral-storage": "1Gi"}}
	env = resolve(t, &fakeEnvReader{}, p, c, nil)
	if env.vars["EPH_LIM"] != "1073741824" {
		t.Errorf("EPH_LIM with a pod-level limit = %q", env.vars["EPH_LIM"])
	}

	// In a template, a request that is not set is the limit, as the API
	// server defaults it when it creates the pod.
	tmpl := envPod{pod: &k8sapi.Pod{Spec: p.pod.Spec}, fromTemplate: true}
	c.Resources.Requests = nil
	env = resolve(t, &fakeEnvReader{}, tmpl, c, nil)
	if env.vars["CPU_REQ_M"] != "1500" || env.vars["MEM_REQ_MI"] != "256" {
		t.Errorf("requests from a template's limits: %v", env.vars)
	}
}

func TestResolveEnvWithoutTheSecretsRight(t *testing.T) {
	r := &fakeEnvReader{
		configMaps: map[string]map[string]string{"cfg": {"MODE": "cm", "API_KEY": "from-cm"}},
		secrets:    map[string]map[string]string{"db": {"password": "pw"}, "creds": {"API_KEY": "k"}},
		forbidden:  map[string]bool{"Secret/db": true, "Secret/creds": true},
	}
	services := map[string]string{"WEB_SERVICE_HOST": "10.96.0.10", "PW": "from-services"}
	c := k8sapi.Container{
		EnvFrom: []k8sapi.EnvFromSource{
			{ConfigMapRef: &k8sapi.EnvFromOf{Name: "cfg"}},
			{Prefix: "CREDS_", SecretRef: &k8sapi.EnvFromOf{Name: "creds"}},
		},
		Env: []k8sapi.EnvVar{
			from("PW", secretKey("db", "password", false)),
			value("DSN", "user:$(PW)@db"),
			value("AUTH", "key=$(CREDS_API_KEY)"),
			value("PLAIN", "$(MODE)-$(WEB_SERVICE_HOST)"),
			from("PW2", secretKey("db", "password", false)),
			value("PW2", "overridden"), // a later value replaces the gap
		},
	}
	env := resolve(t, r, runningPod(), c, services)
	want := map[string]string{
		"MODE": "cm", "API_KEY": "from-cm", "PLAIN": "cm-10.96.0.10", "PW2": "overridden", "WEB_SERVICE_HOST": "10.96.0.10",
	}
	if !reflect.DeepEqual(env.vars, want) {
		t.Errorf("vars:\n got %v\nwant %v", env.vars, want)
	}
	gaps := map[string]string{}
	for name, g := range env.gaps {
		gaps[name] = g.rule
	}
	if want := map[string]string{"PW": ruleGetSecrets, "DSN": ruleGetSecrets, "AUTH": ruleGetSecrets}; !maps.Equal(gaps, want) {
		t.Errorf("gaps %v, want %v", env.gaps, want)
	}
	if len(env.unread) != 1 || env.unread[0].prefix != "CREDS_" || env.unread[0].rule != ruleGetSecrets || !strings.Contains(env.unread[0].what, `"creds"`) {
		t.Errorf("unread %+v", env.unread)
	}
	for _, v := range env.vars {
		if strings.Contains(v, "pw") || v == "k" {
			t.Errorf("a Secret's value leaked: %q", v)
		}
	}
}

func TestServiceLinkEnv(t *testing.T) {
	port := func(name string, n int, proto string) k8sapi.ServicePort {
		return k8sapi.ServicePort{Name: name, Port: n, Protocol: proto}
	}
	services := []k8sapi.Service{
		{Metadata: k8sapi.ObjectMeta{Name: "my-db"}, Spec: k8sapi.ServiceSpec{ClusterIP: "10.96.0.5", Ports: []k8sapi.ServicePort{port("", 5432, "")}}},
		{Metadata: k8sapi.ObjectMeta{Name: "web"}, Spec: k8sapi.ServiceSpec{ClusterIP: "10.96.0.6", Ports: []k8sapi.ServicePort{port("http", 80, "TCP"), port("dns-udp", 53, "UDP")}}},
		{Metadata: k8sapi.ObjectMeta{Name: "v6"}, Spec: k8sapi.ServiceSpec{ClusterIP: "fd00::1", Ports: []k8sapi.ServicePort{port("", 443, "TCP")}}},
		{Metadata: k8sapi.ObjectMeta{Name: "headless"}, Spec: k8sapi.ServiceSpec{ClusterIP: "None", Ports: []k8sapi.ServicePort{port("", 80, "")}}},
		{Metadata: k8sapi.ObjectMeta{Name: "external"}, Spec: k8sapi.ServiceSpec{Type: "ExternalName", ExternalName: "example.com"}},
	}
	got := serviceLinkEnv(services)
	want := map[string]string{
		"MY_DB_SERVICE_HOST": "10.96.0.5", "MY_DB_SERVICE_PORT": "5432",
		"MY_DB_PORT": "tcp://10.96.0.5:5432", "MY_DB_PORT_5432_TCP": "tcp://10.96.0.5:5432",
		"MY_DB_PORT_5432_TCP_PROTO": "tcp", "MY_DB_PORT_5432_TCP_PORT": "5432", "MY_DB_PORT_5432_TCP_ADDR": "10.96.0.5",

		"WEB_SERVICE_HOST": "10.96.0.6", "WEB_SERVICE_PORT": "80",
		"WEB_SERVICE_PORT_HTTP": "80", "WEB_SERVICE_PORT_DNS_UDP": "53",
		"WEB_PORT": "tcp://10.96.0.6:80", "WEB_PORT_80_TCP": "tcp://10.96.0.6:80",
		"WEB_PORT_80_TCP_PROTO": "tcp", "WEB_PORT_80_TCP_PORT": "80", "WEB_PORT_80_TCP_ADDR": "10.96.0.6",
		"WEB_PORT_53_UDP":       "udp://10.96.0.6:53",
		"WEB_PORT_53_UDP_PROTO": "udp", "WEB_PORT_53_UDP_PORT": "53", "WEB_PORT_53_UDP_ADDR": "10.96.0.6",

		"V6_SERVICE_HOST": "fd00::1", "V6_SERVICE_PORT": "443",
		"V6_PORT": "tcp://[fd00::1]:443", "V6_PORT_443_TCP": "tcp://[fd00::1]:443",
		"V6_PORT_443_TCP_PROTO": "tcp", "V6_PORT_443_TCP_PORT": "443", "V6_PORT_443_TCP_ADDR": "fd00::1",
	}
	if !maps.Equal(got, want) {
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("unexpected %s=%q", k, v)
			}
		}
	}
}
