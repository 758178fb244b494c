package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"plug/keys"
	"plug/tunnel"
)

// A run's environment (--env-from): the environment of a workload's
// container, read by the profile's agent before anything else happens,
// given to CMD and written to the files asked for. Variables that describe
// this machine rather than the workload are kept from this machine
// (laptopVars, --env-keep); --env values win over everything.

// laptopVars are the variables a run keeps from this machine by default:
// who and where the developer is, their terminal and desktop session, and
// on Windows the system's own. A name ending in '*' is a prefix.
var laptopVars = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "HOSTNAME", "PWD", "OLDPWD",
	"TMPDIR", "TMP", "TEMP", "TERM", "TERMINFO", "COLORTERM", "LANG", "LANGUAGE", "LC_*",
	"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_*", "DBUS_SESSION_BUS_ADDRESS",
	"SSH_AUTH_SOCK", "SSH_AGENT_PID", "PLUG_HOME",
	"TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "__CF_USER_TEXT_ENCODING",
	"USERPROFILE", "USERNAME", "USERDOMAIN", "HOMEDRIVE", "HOMEPATH", "APPDATA", "LOCALAPPDATA",
	"PROGRAMDATA", "PROGRAMFILES", "PROGRAMFILES(X86)", "PROGRAMW6432", "COMMONPROGRAMFILES",
	"COMMONPROGRAMFILES(X86)", "COMMONPROGRAMW6432", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR",
	"COMSPEC", "PATHEXT", "OS", "PROCESSOR_*", "NUMBER_OF_PROCESSORS", "MSYSTEM",
}

// envPlan is a run's --env-from and what goes with it, checked.
type envPlan struct {
	req      tunnel.EnvRequest
	target   *target  // the profile whose agent reads it
	file     string   // --env-file, "" for none
	jsonFile string   // --env-json, "" for none
	set      []string // --env NAME=VALUE, in order
	keep     keepRules
}

// keepRules decide which variables a run keeps from this machine: those
// laptopVars or an --env-keep NAME match, unless an --env-keep -NAME
// matches too.
type keepRules struct {
	keep, drop []string // names, or prefixes ending in '*'
}

// parseEnvFrom reads --env-from [PROFILE/]KIND/NAME[:CONTAINER].
func parseEnvFrom(v string) (profile string, req tunnel.EnvRequest, err error) {
	rest := v
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		rest, req.Container = rest[:i], rest[i+1:]
		if req.Container == "" {
			return "", req, fmt.Errorf("--env-from %s: the container after ':' is empty", v)
		}
	}
	profile, req.Kind, req.Name, err = parseWorkload(rest, "KIND/NAME[:CONTAINER], e.g. deploy/web or deploy/web:app (PROFILE/KIND/NAME with several profiles)")
	if err != nil {
		return "", req, fmt.Errorf("--env-from %s: %v", v, err)
	}
	if err := tunnel.CheckEnvRequest(req); err != nil {
		return "", req, fmt.Errorf("--env-from %s: %v", v, err)
	}
	return profile, req, nil
}

// parseWorkload reads [PROFILE/]KIND/NAME: the profile ("" when not
// given), the kind (one of tunnel's Workload kinds) and the name. form is
// how to write it, for the error of a value of another form.
func parseWorkload(v, form string) (profile, kind, name string, err error) {
	parts := strings.Split(v, "/")
	switch len(parts) {
	case 2:
	case 3:
		profile, parts = parts[0], parts[1:]
		if err := keys.ValidName(profile); err != nil {
			return "", "", "", err
		}
	default:
		return "", "", "", fmt.Errorf("name a workload as %s", form)
	}
	kind, ok := workloadAliases[strings.ToLower(parts[0])]
	if !ok {
		return "", "", "", fmt.Errorf("%q is not a kind of workload (deploy, statefulset, daemonset, job, pod; service on Swarm)", parts[0])
	}
	return profile, kind, parts[1], nil
}

// workloadAliases are the words --env-from takes for each kind, as kubectl
// and docker spell them.
var workloadAliases = map[string]string{
	"deploy": tunnel.WorkloadDeployment, "deployment": tunnel.WorkloadDeployment, "deployments": tunnel.WorkloadDeployment,
	"sts": tunnel.WorkloadStatefulSet, "statefulset": tunnel.WorkloadStatefulSet, "statefulsets": tunnel.WorkloadStatefulSet,
	"ds": tunnel.WorkloadDaemonSet, "daemonset": tunnel.WorkloadDaemonSet, "daemonsets": tunnel.WorkloadDaemonSet,
	"job": tunnel.WorkloadJob, "jobs": tunnel.WorkloadJob,
	"po": tunnel.WorkloadPod, "pod": tunnel.WorkloadPod, "pods": tunnel.WorkloadPod,
	"svc": tunnel.WorkloadService, "service": tunnel.WorkloadService, "services": tunnel.WorkloadService,
}

// parseSetting reads --env NAME=VALUE.
func parseSetting(v string) error {
	name, _, ok := strings.Cut(v, "=")
	if !ok || name == "" || strings.ContainsRune(v, 0) {
		return fmt.Errorf("--env %s: give NAME=VALUE, e.g. --env LOG_LEVEL=debug", v)
	}
	return nil
}

// parseKeep reads the comma-separated items of --env-keep.
func parseKeep(values []string) (keepRules, error) {
	r := keepRules{keep: laptopVars}
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			name, drop := strings.CutPrefix(strings.TrimSpace(item), "-")
			pattern := strings.TrimSuffix(name, "*")
			if pattern == "" && !drop || strings.ContainsAny(pattern, "=*\x00") {
				return r, fmt.Errorf("--env-keep %s: give names or prefixes ending in '*', e.g. --env-keep GOPATH,NODE_* or --env-keep -LANG to import the workload's LANG", v)
			}
			if drop {
				r.drop = append(r.drop, name)
			} else {
				r.keep = append(r.keep, name)
			}
		}
	}
	return r, nil
}

// keeps reports whether this machine's name is kept over the workload's.
func (r keepRules) keeps(name string) bool {
	return matchesAny(r.keep, name) && !matchesAny(r.drop, name)
}

func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if hasPrefixFold(name, prefix) {
				return true
			}
		} else if sameName(name, p) {
			return true
		}
	}
	return false
}

// sameName compares variable names as the OS does: without case on
// Windows.
func sameName(a, b string) bool {
	if runtime.GOOS == "windows" {
		return strings.EqualFold(a, b)
	}
	return a == b
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && sameName(s[:len(prefix)], prefix)
}

// importedEnv is a run's environment, made.
type importedEnv struct {
	cmd     []string          // CMD's environment, NAME=VALUE
	written []tunnel.EnvVar   // what the files get: the workload's, with --env, without what this machine keeps
	kept    []string          // the workload's variables this machine's own replaced
	from    *tunnel.Env       // what the agent sent
	invalid map[string]string // variables the files cannot hold, and why
}

// composeEnv makes CMD's environment: the workload's variables, except
// those keep says this machine keeps (taken from laptop when it has them),
// with the --env settings over all.
func composeEnv(laptop []string, e *tunnel.Env, set []string, keep keepRules) *importedEnv {
	out := &importedEnv{from: e}
	for _, v := range e.Vars {
		if keep.keeps(v.Name) {
			out.kept = append(out.kept, v.Name)
			continue
		}
		out.written = append(out.written, v)
	}
	for _, s := range set {
		name, value, _ := strings.Cut(s, "=")
		out.written = setVar(out.written, name, value)
	}
	sort.Slice(out.written, func(i, j int) bool { return out.written[i].Name < out.written[j].Name })
	cmd := append([]tunnel.EnvVar(nil), out.written...)
	for _, kv := range laptop {
		name, value, _ := strings.Cut(kv, "=")
		if keep.keeps(name) && !has(out.written, name) {
			cmd = append(cmd, tunnel.EnvVar{Name: name, Value: value})
		}
	}
	for _, v := range cmd {
		out.cmd = append(out.cmd, v.Name+"="+v.Value)
	}
	return out
}

// setVar sets name in vars, replacing a variable of that name.
func setVar(vars []tunnel.EnvVar, name, value string) []tunnel.EnvVar {
	for i := range vars {
		if sameName(vars[i].Name, name) {
			vars[i] = tunnel.EnvVar{Name: name, Value: value}
			return vars
		}
	}
	return append(vars, tunnel.EnvVar{Name: name, Value: value})
}

func has(vars []tunnel.EnvVar, name string) bool {
	for _, v := range vars {
		if sameName(v.Name, name) {
			return true
		}
	}
	return false
}

// overlay is this machine's environment with the --env settings, for a run
// that imports none.
func overlay(laptop, set []string) []string {
	var vars []tunnel.EnvVar
	for _, kv := range laptop {
		name, value, _ := strings.Cut(kv, "=")
		vars = setVar(vars, name, value)
	}
	for _, s := range set {
		name, value, _ := strings.Cut(s, "=")
		vars = setVar(vars, name, value)
	}
	var out []string
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// fetchEnv reads the run's environment from its profile's agent, says on
// stderr what it holds and what it lacks (names, never values), and
// writes the files asked for. Errors exit with ExitConnect: CMD does not
// start.
func (c *cli) fetchEnv(p *plan) (*importedEnv, error) {
	ep := p.env
	t := ep.target
	prefix := p.prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := tunnel.FetchEnv(ctx, tunnel.ClientConfig{
		Addr: t.profile.Addr(), User: t.user, Signer: t.signer, HostKey: t.hostKey, Profile: t.profile.Name,
	}, ep.req)
	if err != nil {
		return nil, &exitCode{ExitConnect, fmt.Errorf("%scannot read the environment of %s: %v", prefix, ep.req, err)}
	}
	env := composeEnv(os.Environ(), e, ep.set, ep.keep)
	c.tellEnv(prefix, t.profile.Name, env)
	for _, f := range []struct {
		path   string
		format func(*importedEnv) []byte
	}{{ep.file, dotenv}, {ep.jsonFile, envJSON}} {
		if f.path == "" {
			continue
		}
		if err := writePrivate(f.path, f.format(env)); err != nil {
			return nil, &exitCode{ExitFailed, fmt.Errorf("writing %s: %v", f.path, err)}
		}
		fmt.Fprintf(c.stderr, "plug: %swrote %s (%d variables, readable by you only)\n", prefix, f.path, len(env.written)-len(env.unwritable()))
	}
	if names := env.unwritable(); len(names) > 0 {
		fmt.Fprintf(c.stderr, "plug: %snot in the files, as their formats cannot hold them: %s\n", prefix, strings.Join(names, ", "))
	}
	return env, nil
}

// tellEnv says what a run's environment holds and lacks, one line each.
func (c *cli) tellEnv(prefix, profile string, env *importedEnv) {
	e := env.from
	line := fmt.Sprintf("plug: %senvironment of %s: %d variables", prefix, e.Workload, len(e.Vars))
	if len(env.kept) > 0 {
		line += "; this machine's own kept: " + strings.Join(printableAll(env.kept), ", ")
	}
	fmt.Fprintln(c.stderr, line)
	var rules []string
	byRule := map[string][]string{}
	for _, g := range e.LeftOut {
		if _, ok := byRule[g.Rule]; !ok {
			rules = append(rules, g.Rule)
		}
		item := g.Why
		if g.Name != "" {
			item = g.Name + " (" + g.Why + ")"
		}
		byRule[g.Rule] = append(byRule[g.Rule], item)
	}
	for _, rule := range rules {
		if rule == "" {
			fmt.Fprintf(c.stderr, "plug: %sleft out, as only the node knows them: %s\n", prefix, strings.Join(byRule[rule], ", "))
			continue
		}
		fmt.Fprintf(c.stderr, "plug: %sleft out, as the agent lacks the right %q (plug doctor -p %s prints the command that grants it): %s\n",
			prefix, rule, profile, strings.Join(byRule[rule], ", "))
	}
	for _, n := range e.Notes {
		fmt.Fprintf(c.stderr, "plug: %snote: %s\n", prefix, n)
	}
}

func printableAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = tunnel.PeerText(n)
	}
	return out
}

// unwritable names the variables the files leave out: values that are not
// UTF-8 text, and names a dotenv parser cannot read.
func (env *importedEnv) unwritable() []string {
	var names []string
	for _, v := range env.written {
		if !utf8.ValidString(v.Value) || dotenvKey(v.Name) == "" {
			names = append(names, tunnel.PeerText(v.Name))
		}
	}
	return names
}

// dotenv writes the variables one a line, in the syntax python-dotenv,
// docker compose and the other dotenv readers share: NAME=VALUE when the
// value has only letters, digits and ./:@%+,_-; else NAME='VALUE' (taken
// literally, newlines included) when it has no ' or \ or carriage return;
// else NAME="VALUE" with \\ \" \n \r \t escaped. $ is never special here:
// read the file with interpolation off (python-dotenv: interpolate=False)
// or a value holding ${...} changes.
func dotenv(env *importedEnv) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# The environment of %s, written by plug.\n", strings.ReplaceAll(tunnel.PeerText(env.from.Workload), "\n", " "))
	fmt.Fprintf(&b, "# Values are literal: read it with interpolation off.\n")
	for _, v := range env.written {
		key := dotenvKey(v.Name)
		if key == "" || !utf8.ValidString(v.Value) {
			continue
		}
		b.WriteString(key + "=" + dotenvValue(v.Value) + "\n")
	}
	return b.Bytes()
}

// dotenvKey is name as a dotenv key, quoted when it needs to be; "" when
// no dotenv reader can take it.
func dotenvKey(name string) string {
	if !utf8.ValidString(name) || strings.ContainsAny(name, "\r\n") {
		return ""
	}
	if !strings.ContainsAny(name, " \t#'\"") {
		return name
	}
	if strings.Contains(name, "'") {
		return ""
	}
	return "'" + name + "'"
}

func dotenvValue(v string) string {
	plain := v != ""
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("./:@%+,_-", r)) {
			plain = false
			break
		}
	}
	switch {
	case plain || v == "":
		return v
	case !strings.ContainsAny(v, "'\\\r"):
		return "'" + v + "'"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return `"` + r.Replace(v) + `"`
}

// envJSON writes the variables as one JSON object, NAME to VALUE, names
// sorted.
func envJSON(env *importedEnv) []byte {
	m := map[string]string{}
	for _, v := range env.written {
		if utf8.ValidString(v.Value) && utf8.ValidString(v.Name) {
			m[v.Name] = v.Value
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(m)
	return b.Bytes()
}

// writePrivate writes data to path, readable and writable by its owner
// only (0600), replacing the file at once: a reader never sees half of it,
// and a file there before keeps none of its permissions.
func writePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".plug-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			return le.Err
		}
		return err
	}
	return nil
}
