package localnames

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"plug/tunnel"
)

// Profile is the catalog of one profile of the run.
type Profile struct {
	Name  string
	Names []tunnel.ClusterName
}

// Key identifies a name of the run: which profile (its index in -p
// order) and the name its agent dials.
type Key struct {
	Profile int
	Name    string
}

// Plan is which host names resolve to which name of the run, and what
// the developer is told about it.
type Plan struct {
	Hosts map[Key][]string // each name's host names, in the order given
	Owner map[string]Key   // the name each host name of Hosts reaches
	Notes []string         // names left out, clashes and how they were settled

	// For Update, in a plan of one profile without qualified names:
	single    bool
	noted     map[Key][]string // the notes of each name, which make Notes
	contested map[string]bool  // host names several names have (the first took it)
}

// PlanHosts gives each name of the run its host names: the forms its
// cluster uses (web, web.ns, web.ns.svc, web.ns.svc.cluster.local). With
// several profiles, a host name two profiles have goes to the first given
// with -p, and every name also answers as NAME.PROFILE, so the others stay
// reachable: the clash is told in the notes. qualified gives every name
// NAME.PROFILE with one profile too: where runs share the hosts file
// (Resolver.Shared), another run may hold the other forms. Forms that are
// not valid host names, and those that would hide this machine's own
// names, are left out with a note.
func PlanHosts(profiles []Profile, reserved []string, qualified bool) Plan {
	count := 0
	for _, p := range profiles {
		count += len(p.Names)
	}
	plan := Plan{Hosts: make(map[Key][]string, count), Owner: make(map[string]Key, 4*count)}
	plan.single = len(profiles) == 1 && !qualified
	if plan.single {
		plan.noted, plan.contested = map[Key][]string{}, map[string]bool{}
		plan.claimForms(profiles[0].Names, reserved)
		plan.Notes = plan.notesInOrder()
		return plan
	}
	type clash struct {
		winner int // the profile that keeps the host names
		loser  Key // the name that does not get them
	}
	clashes := map[clash][]string{}
	var order []clash
	claim := func(k Key, host string) {
		if _, taken := plan.Owner[host]; !taken {
			plan.Owner[host] = k
			plan.Hosts[k] = append(plan.Hosts[k], host)
		}
	}
	for i, p := range profiles {
		for _, n := range p.Names {
			k := Key{i, n.Name}
			note := func(note string) { plan.Notes = append(plan.Notes, prefixOf(profiles, i)+note) }
			formHosts(n, reserved, note, func(host string) {
				if first, taken := plan.Owner[host]; taken && first.Profile != i {
					c := clash{first.Profile, k}
					if clashes[c] == nil {
						order = append(order, c)
					}
					clashes[c] = append(clashes[c], host)
					return
				}
				claim(k, host)
			})
		}
	}
	if len(profiles) > 1 || qualified {
		for i, p := range profiles {
			for _, n := range p.Names {
				host := strings.ToLower(n.Name + "." + p.Name)
				if checkHostName(host) == nil && !slices.Contains(reserved, host) {
					claim(Key{i, n.Name}, host)
				}
			}
		}
	}
	for _, c := range order {
		hosts := clashes[c]
		verb, them := "is a name", "it reaches"
		if len(hosts) > 1 {
			verb, them = "are names", "they reach"
		}
		reach := "is not reachable by them"
		if own := plan.Hosts[c.loser]; len(own) > 0 {
			reach = "is reached as " + strings.Join(own, ", ")
		}
		plan.Notes = append(plan.Notes, fmt.Sprintf("%s %s in profiles %s and %s: %s %s's; %s's %s",
			strings.Join(hosts, ", "), verb, profiles[c.winner].Name, profiles[c.loser.Profile].Name,
			them, profiles[c.winner].Name, profiles[c.loser.Profile].Name, reach))
	}
	return plan
}

// claimForms gives each of names, all of profile 0 of a single plan, in
// order, the host names of its forms that no name before it took; a form
// that is not a valid host name, or is one of reserved, is noted.
func (p *Plan) claimForms(names []tunnel.ClusterName, reserved []string) {
	for _, n := range names {
		k := Key{0, n.Name}
		note := func(note string) { p.noted[k] = append(p.noted[k], note) }
		formHosts(n, reserved, note, func(host string) {
			switch owner, taken := p.Owner[host]; {
			case !taken:
				p.Owner[host] = k
				p.Hosts[k] = append(p.Hosts[k], host)
			case owner != k:
				p.contested[host] = true
			}
		})
	}
}

// formHosts calls use with each form of n (its name, then its aliases) as
// a host name, lower case, and note with why for each form left out: one
// that is not a valid host name, or is one of reserved.
func formHosts(n tunnel.ClusterName, reserved []string, note, use func(string)) {
	for f := -1; f < len(n.Aliases); f++ {
		form := n.Name
		if f >= 0 {
			form = n.Aliases[f]
		}
		host := strings.ToLower(form)
		if err := checkHostName(host); err != nil {
			note(fmt.Sprintf("%v: programs cannot reach it by that name", err))
			continue
		}
		if slices.Contains(reserved, host) {
			note(fmt.Sprintf("%s is left out: it is a name of this machine", host))
			continue
		}
		use(host)
	}
}

// notesInOrder is the notes of a single plan, its names' in name order.
func (p *Plan) notesInOrder() []string {
	var notes []string
	for _, k := range slices.SortedFunc(maps.Keys(p.noted), func(a, b Key) int { return strings.Compare(a.Name, b.Name) }) {
		notes = append(notes, p.noted[k]...)
	}
	return notes
}

// Update brings a plan that PlanHosts made of one profile, without
// qualified names, to that profile's names with set added or changed and
// gone removed (tunnel.DiffNames), planning only those: the same plan as
// PlanHosts of the new names would be. It returns false, the plan then
// to be made anew with PlanHosts, when the change touches a host name
// several names have, whose owner depends on the names' order, or when
// the plan is not of one profile.
func (p *Plan) Update(set []tunnel.ClusterName, gone, reserved []string) bool {
	if !p.single {
		return false
	}
	drop := func(name string) bool {
		k := Key{0, name}
		for _, host := range p.Hosts[k] {
			if p.contested[host] {
				return false
			}
			delete(p.Owner, host)
		}
		delete(p.Hosts, k)
		delete(p.noted, k)
		return true
	}
	for _, name := range gone {
		if !drop(name) {
			return false
		}
	}
	for _, n := range set {
		if !drop(n.Name) {
			return false
		}
	}
	free := true
	for _, n := range set {
		formHosts(n, reserved, func(string) {}, func(host string) {
			if owner, taken := p.Owner[host]; taken && owner.Name != n.Name {
				free = false
			}
		})
	}
	if !free {
		return false
	}
	p.claimForms(set, reserved)
	if len(p.noted) > 0 || len(p.Notes) > 0 {
		p.Notes = p.notesInOrder()
	}
	return true
}

// prefixOf labels a note about profile i when the run has several.
func prefixOf(profiles []Profile, i int) string {
	if len(profiles) < 2 {
		return ""
	}
	return profiles[i].Name + ": "
}

// checkHostName accepts what resolvers take from a hosts file: at most 253
// characters of dot-separated labels, each 1 to 63 lowercase letters,
// digits, '-' or '_', not starting or ending with '-'. (Docker's service
// names may hold '_'; resolvers accept it in a hosts file.)
func checkHostName(host string) error {
	const form = "a host name is dot-separated labels of letters, digits, '-' and '_'"
	if host == "" || len(host) > 253 {
		return fmt.Errorf("%q is not a valid host name (%s, at most 253 characters)", host, form)
	}
	for rest := host; rest != ""; {
		label, after, _ := strings.Cut(rest, ".")
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' || after == "" && len(label) < len(rest) {
			return fmt.Errorf("%q is not a valid host name (%s; a label is 1 to 63 characters and does not start or end with '-')", host, form)
		}
		rest = after
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a valid host name: it contains %q (%s)", host, c, form)
			}
		}
	}
	return nil
}

// HostLine is one line of a hosts file: an address and its names.
type HostLine struct {
	Addr  netip.Addr
	Names []string
}

// hostsText is the hosts file the run's programs see: the run's names
// first, so that they win over the machine's, then the machine's own file
// unchanged.
func hostsText(runID string, lines []HostLine, machine []byte) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# The cluster names of plug run %s, seen only by the programs it started.\n", runID)
	for _, l := range lines {
		fmt.Fprintf(&b, "%s\t%s\n", l.Addr, strings.Join(l.Names, " "))
	}
	b.WriteString("# This machine's own hosts file:\n")
	b.Write(machine)
	if len(machine) > 0 && machine[len(machine)-1] != '\n' {
		b.WriteByte('\n')
	}
	return []byte(b.String())
}
