package tunnel

import (
	"fmt"
	"strings"
)

// Narrowing open admission: with open admission any key that reaches the
// agent gets in, and by default may do everything a run can. The
// operator's OpenRules (PLUG_OPEN_SERVE, PLUG_OPEN_ENV_SECRETS,
// PLUG_OPEN_VOLUMES) narrow what a key may do that nobody vouched for: a
// key that is neither a member nor an admin (Vouching), or every key when
// the agent keeps no members. The zero OpenRules narrows nothing. Each
// refusal names the switch, and what the developer does instead.

// What OpenRules.Serve lets a key nobody vouched for serve.
const (
	OpenServeTakeover = "takeover" // any name: new ones, and deployed services, taken over (the default)
	OpenServeNew      = "new"      // names the cluster does not have; a deployed service is refused
	OpenServeNone     = "none"     // nothing: such a key only consumes (-c)
)

// Which volumes OpenRules.Volumes lets a key nobody vouched for mount.
const (
	OpenVolumesReadWrite = "read-write" // as the workload mounts them (the default)
	OpenVolumesReadOnly  = "read-only"  // every volume served read-only
	OpenVolumesOff       = "off"        // none
)

// The operator's switches, as the agent's environment names them.
const (
	EnvOpenServe      = "PLUG_OPEN_SERVE"
	EnvOpenEnvSecrets = "PLUG_OPEN_ENV_SECRETS"
	EnvOpenVolumes    = "PLUG_OPEN_VOLUMES"
)

// OpenRules is what a key nobody vouched for may do.
type OpenRules struct {
	Serve        string // OpenServe...; "" is OpenServeTakeover
	NoEnvSecrets bool   // --env-from of an environment with values from a Secret is refused
	Volumes      string // OpenVolumes...; "" is OpenVolumesReadWrite
}

// ParseOpenRules reads the switches from getenv (os.Getenv). A value
// that is not one of a switch's is an error naming the switch and its
// values.
func ParseOpenRules(getenv func(string) string) (OpenRules, error) {
	var o OpenRules
	pick := func(name string, values ...string) (string, error) {
		v := getenv(name)
		if v == "" || v == values[0] {
			return "", nil
		}
		for _, ok := range values[1:] {
			if v == ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("%s=%s is not one of %s; unset it for %s", name, PeerText(v), strings.Join(values, ", "), values[0])
	}
	var err error
	if o.Serve, err = pick(EnvOpenServe, OpenServeTakeover, OpenServeNew, OpenServeNone); err != nil {
		return o, err
	}
	if o.Volumes, err = pick(EnvOpenVolumes, OpenVolumesReadWrite, OpenVolumesReadOnly, OpenVolumesOff); err != nil {
		return o, err
	}
	secrets, err := pick(EnvOpenEnvSecrets, "on", "off")
	o.NoEnvSecrets = secrets == "off"
	return o, err
}

// String lists the switches set, for the agent's log at start; "" when
// none is.
func (o OpenRules) String() string {
	var set []string
	if o.Serve != "" {
		set = append(set, EnvOpenServe+"="+o.Serve)
	}
	if o.NoEnvSecrets {
		set = append(set, EnvOpenEnvSecrets+"=off")
	}
	if o.Volumes != "" {
		set = append(set, EnvOpenVolumes+"="+o.Volumes)
	}
	return strings.Join(set, " ")
}

// Vouching is a Keys that knows which of the keys it admits someone
// vouched for (Members: a member or an admin). OpenRules narrow what the
// others may do. A Keys that is not Vouching (a gateway's key deposit)
// vouches for every key it admits.
type Vouching interface {
	Vouches(fingerprint string) bool
}

// narrowed reports whether the OpenRules apply to the key fp.
func (a *Agent) narrowed(fp string) bool {
	if a.Open == (OpenRules{}) {
		return false
	}
	if a.Keys == nil {
		return true
	}
	v, ok := a.Keys.(Vouching)
	return ok && !v.Vouches(fp)
}

// insteadOfNarrowed is what a narrowed key's developer may do instead.
const insteadOfNarrowed = "or ask the cluster's operator to make your key a member (plug agent members add; deploy/README.md, Narrowing open admission)"

// openServeRefusal is the refusal of serving name for the key fp, or nil;
// personal says the name is asked for as a personal takeover, which only
// a deployed service has. The refusal of a full takeover comes from the
// platform (Binding.NoTakeover, noTakeover), which alone knows the name
// is deployed; takeoverRefusal words it.
func (a *Agent) openServeRefusal(fp, name string, personal bool) error {
	switch {
	case !a.narrowed(fp):
		return nil
	case a.Open.Serve == OpenServeNew && personal:
		return takeoverRefusal(name)
	case a.Open.Serve != OpenServeNone:
		return nil
	}
	countRefusal("open_serve")
	return fmt.Errorf("cannot serve %s: this agent lets keys that are not members serve no names (%s=%s): run with -c to reach the cluster's names only, %s", name, EnvOpenServe, OpenServeNone, insteadOfNarrowed)
}

// noTakeover reports whether the key fp may serve new names only.
func (a *Agent) noTakeover(fp string) bool {
	return a.Open.Serve == OpenServeNew && a.narrowed(fp)
}

// takeoverRefusal words a platform's refusal of a takeover the binding
// did not allow.
func takeoverRefusal(name string) error {
	countRefusal("open_takeover")
	return &RefusedError{Name: name, Text: fmt.Sprintf("cannot serve %s: it is a deployed service, and this agent lets keys that are not members serve new names only, not take deployed ones over (%s=%s): choose a name the cluster does not have, %s", name, EnvOpenServe, OpenServeNew, insteadOfNarrowed)}
}

// openEnvRefusal is the refusal of sending env to the key fp, or nil.
func (a *Agent) openEnvRefusal(fp string, env *Env) error {
	if !a.narrowed(fp) || !a.Open.NoEnvSecrets {
		return nil
	}
	var secrets []string
	for _, s := range env.Sources {
		if s.Kind == "Secret" {
			secrets = append(secrets, s.Name)
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	countRefusal("open_env_secrets")
	return fmt.Errorf("the environment of %s holds values of the Secret %s, and this agent lets keys that are not members read no Secret-backed environment (%s=off); nothing was sent: leave --env-from out, %s", env.Workload, strings.Join(secrets, ", "), EnvOpenEnvSecrets, insteadOfNarrowed)
}

// openVolume applies the rules to a volume request of the key fp: a
// refusal, or req made read-only.
func (a *Agent) openVolume(fp string, req *VolumeRequest) error {
	if !a.narrowed(fp) {
		return nil
	}
	switch a.Open.Volumes {
	case OpenVolumesOff:
		countRefusal("open_volumes")
		return fmt.Errorf("cannot serve the volume %s: this agent serves no volumes to keys that are not members (%s=%s): %s", req, EnvOpenVolumes, OpenVolumesOff, strings.TrimPrefix(insteadOfNarrowed, "or "))
	case OpenVolumesReadOnly:
		req.ReadOnly = true
	}
	return nil
}
