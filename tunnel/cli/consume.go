package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/localnames"
)

// The names a run consumes. Every program a run starts (-c and -s alike)
// reaches the cluster's Services by the names pods use — web, web.ns,
// web.ns.svc, web.ns.svc.cluster.local — on their ports. Each name gets a
// loopback address of its own (localnames.Pool) on which the run listens on
// the name's ports, carrying every connection over one SSH channel to the
// agent, which dials the name inside the cluster. A resolver, per OS, makes
// the names resolve to those addresses for CMD (localnames.Resolver). The
// agent's catalog keeps it all current while the run lasts. Where the
// resolver lets the run answer names as CMD looks them up (on Linux, the
// run's own DNS responder), a name gets its address and listeners only
// then: a run's cost follows the names its programs use, and CMD starts
// at once. The agents' catalogs are asked for only at CMD's first lookup
// (a command that looks nothing up costs nothing for them, whatever the
// cluster holds), and that lookup waits for them and their plan (namesWait
// at most, as CMD would have waited to start). Elsewhere the catalogs are
// asked for at once and every name gets its address and listeners at
// start.

const (
	// namesWait bounds the wait for the agents' first catalogs before CMD
	// starts, or (lazy) from CMD's first lookup before it is answered;
	// names that come later are added as they come.
	namesWait = 5 * time.Second
	// maxListeners bounds the ports one run listens on.
	maxListeners = 4096
	// namesShown is how many names the first status line lists.
	namesShown = 6
)

// consumer gives CMD the names of every profile of the run.
type consumer struct {
	say      func(string) // a status line on stderr
	profiles []consumedProfile
	res      localnames.Resolver // nil when names cannot resolve here (told at start)
	pool     *localnames.Pool
	reserved []string // this machine's own names, never shadowed
	refusals refusals

	mu        sync.Mutex
	addrs     map[localnames.Key]netip.Addr
	listeners map[listenKey]closer
	flows     *tunnel.FlowCap         // the run's UDP flows
	failed    map[listenKey]string    // why a port does not answer, as told
	told      map[string]bool         // notes told, kept while they hold
	known     map[localnames.Key]bool // the names of the last reconcile
	lines     []localnames.HostLine   // what the names resolve to, as of the last reconcile
	started   bool                    // the first reconcile is done

	// The catalogs as of the last reconcile.
	plan         localnames.Plan
	byKey        map[localnames.Key]tunnel.ClusterName
	catalogNotes []string
	planOf       []tunnel.ClusterName // the names of the plan's one profile (nil: several)
	// lazy: names get their addresses and listeners when CMD looks them
	// up (Resolver.Answer); eager says why not, when not.
	lazy   bool
	eager  string
	looked map[localnames.Key]bool // lazy: the names CMD looked up
	// wanted is closed at CMD's first lookup (lazy): the catalogs are
	// asked for then.
	wanted     chan struct{}
	wantedOnce sync.Once
	// planned is closed once the first reconcile is done: a lookup
	// waits for it (or for stop).
	planned     chan struct{}
	plannedOnce sync.Once

	kick    chan struct{}
	stop    chan struct{}
	halting sync.Once
	done    sync.WaitGroup
}

// consumedProfile is one profile of the run and its session.
type consumedProfile struct {
	name    string
	session *tunnel.Session
}

// listenKey is one port of one name, TCP or UDP.
type listenKey struct {
	name localnames.Key
	port int
	udp  bool
}

// closer is a listener of a name's port: *portListener or *udpListener.
type closer interface{ close() }

// newResolver is the resolver of this system (a variable for the tests,
// which give a run a hosts file of their own on any system).
var newResolver = localnames.NewResolver

// consume sets up the names of every session of the run, asking for the
// agents' catalogs and waiting a moment for them (lazy: at CMD's first
// lookup, see lookup), and keeps them current until close.
// When names cannot resolve on this machine, it says why once and CMD runs
// without them. allAtStart gives every name its address and listeners at
// start even where the resolver could answer them as CMD looks them up:
// a container resolves the names by --add-host lines made at start.
func (c *cli) consume(runs []*session, allAtStart bool) *consumer {
	co := &consumer{
		say:       func(line string) { fmt.Fprintln(c.stderr, "plug: "+line) },
		reserved:  machineNames(),
		addrs:     map[localnames.Key]netip.Addr{},
		listeners: map[listenKey]closer{},
		flows:     newFlowBudget(),
		failed:    map[listenKey]string{},
		told:      map[string]bool{},
		known:     map[localnames.Key]bool{},
		looked:    map[localnames.Key]bool{},
		wanted:    make(chan struct{}),
		planned:   make(chan struct{}),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	co.refusals.say = co.say
	for _, r := range runs {
		co.profiles = append(co.profiles, consumedProfile{name: r.profile.Name, session: r.tunnel})
	}
	var dir string // where the hosts file is backed up (macOS, Windows)
	if store, err := keys.Home(); err == nil {
		dir = store.Dir()
	}
	res, err := newResolver(fmt.Sprintf("pid %d", os.Getpid()), dir, co.say)
	if err != nil {
		co.say(fmt.Sprintf("warning: cluster names will not resolve for the command: %v", err))
		return co
	}
	co.res, co.pool = res, localnames.NewPool()
	if allAtStart {
		co.eager = "the command is a container, which resolves the names by --add-host lines made at start"
	} else if err := res.Answer(co.lookup); err != nil {
		co.eager = err.Error()
	} else {
		co.lazy = true
	}
	if res.Shared() {
		co.say("the cluster names go in this machine's hosts file, which every plug run shares: a host name several runs publish reaches the cluster of the run that published it first, and each run's names also answer as NAME.PROFILE")
	}
	if !co.lazy {
		co.askCatalogs()
		co.awaitCatalogs()
		co.reconcile()
		co.keepCurrent()
		return co
	}
	// Receiving and planning a large namespace's catalog is not on the
	// way to CMD: it is asked for at the first lookup, which waits for it.
	co.done.Add(1)
	go func() {
		defer co.done.Done()
		select {
		case <-co.wanted:
		case <-co.stop:
			return
		}
		co.askCatalogs()
		if co.awaitCatalogs() {
			co.reconcile()
			co.keepCurrent()
		}
	}()
	return co
}

// askCatalogs has every session's agent tell its catalog.
func (co *consumer) askCatalogs() {
	for _, p := range co.profiles {
		p.session.AskNames()
	}
}

// keepCurrent reconciles at every change of a catalog until close.
func (co *consumer) keepCurrent() {
	for _, p := range co.profiles {
		co.done.Add(1)
		go co.follow(p.session)
	}
	co.done.Add(1)
	go co.loop()
}

// awaitCatalogs waits, up to namesWait in all, for every session's first
// catalog, once asked for; false if the run closed meanwhile.
func (co *consumer) awaitCatalogs() bool {
	ctx, cancel := context.WithTimeout(context.Background(), namesWait)
	defer cancel()
	for _, p := range co.profiles {
		if !co.awaitCatalog(ctx, p.session) {
			select {
			case <-co.stop:
				return false
			default:
			}
			co.say(co.prefix(p.name) + "the agent has not told the cluster's names yet; they are added when it does")
		}
	}
	return true
}

// awaitCatalog waits for s's first catalog until ctx ends or the run
// closes; false if none came.
func (co *consumer) awaitCatalog(ctx context.Context, s *tunnel.Session) bool {
	for {
		_, known, changed := s.Catalog()
		if known {
			return true
		}
		select {
		case <-changed:
		case <-s.Done():
			return false
		case <-ctx.Done():
			return false
		case <-co.stop:
			return false
		}
	}
}

// follow kicks a reconcile whenever s's catalog changes.
func (co *consumer) follow(s *tunnel.Session) {
	defer co.done.Done()
	for {
		_, _, changed := s.Catalog()
		select {
		case <-changed:
		case <-co.stop:
			return
		}
		select {
		case co.kick <- struct{}{}:
		default:
		}
	}
}

func (co *consumer) loop() {
	defer co.done.Done()
	for {
		select {
		case <-co.kick:
			co.reconcile()
		case <-co.stop:
			return
		}
	}
}

// start starts cmd, resolving the run's names when they can be.
func (co *consumer) start(cmd *exec.Cmd) error {
	if co.res == nil {
		return cmd.Start()
	}
	return co.res.Start(cmd)
}

// halt stops following the catalogs once CMD has ended: a catalog that
// comes while the run says goodbye is not planned (lazy), and lookups
// still asked are not answered. Listeners stay open until close.
func (co *consumer) halt() {
	co.halting.Do(func() { close(co.stop) })
}

// close stops following the catalogs, closes every listener and removes
// what the resolver added. Connections being carried go on until plug
// exits.
func (co *consumer) close() {
	if co.res == nil {
		return
	}
	co.halt()
	co.done.Wait()
	// The resolver first: its responder waits for the lookups it is
	// answering, which take co.mu.
	if err := co.res.Close(); err != nil {
		co.say(fmt.Sprintf("warning: %v", err))
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	for k, l := range co.listeners {
		l.close()
		delete(co.listeners, k)
	}
	co.pool.Close()
}

// reconcile plans the names of the catalogs as they are now, makes
// addresses, listeners and the resolver's names match, and tells what
// changed.
func (co *consumer) reconcile() {
	co.mu.Lock()
	defer co.mu.Unlock()
	changed, all := co.planNames()
	reached, err := co.settle()
	switch {
	case err != nil:
	case co.lazy && !all:
		co.tellChanged(changed)
	case co.lazy:
		co.tellNames(slices.SortedFunc(maps.Keys(co.plan.Hosts), compareKeys))
	default:
		co.tellNames(reached)
	}
	co.plannedOnce.Do(func() { close(co.planned) })
}

// lookup answers a host name CMD looks up (lazy): a name of the run gets
// its address and listeners now, if it has none yet, and the address is
// returned once they are open. The first lookup asks for the agents'
// catalogs, and a lookup made before the first plan waits for it: for the
// catalogs, namesWait at most from the first lookup, then for their
// planning; the answer is then the one CMD would have had had it started
// after them.
func (co *consumer) lookup(host string) (netip.Addr, bool) {
	co.wantedOnce.Do(func() { close(co.wanted) })
	select {
	case <-co.planned:
	case <-co.stop:
		return netip.Addr{}, false
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	k, ok := co.plan.Owner[host]
	if !ok {
		return netip.Addr{}, false
	}
	if !co.looked[k] {
		co.looked[k] = true
		co.settle()
	}
	addr, ok := co.addrs[k]
	return addr, ok
}

// planNames reads the catalogs and plans their host names: only the names
// that changed since the last plan where the plan can be updated (one
// profile: a change costs what it changes), every name otherwise. It
// returns the names that changed, or all when every name was planned.
func (co *consumer) planNames() (changed []localnames.Key, all bool) {
	var profiles []localnames.Profile
	var notes []string
	for _, p := range co.profiles {
		cat, _, _ := p.session.Catalog()
		profiles = append(profiles, localnames.Profile{Name: p.name, Names: cat.Names})
		if cat.Unavailable != "" {
			notes = append(notes, "warning: "+co.prefix(p.name)+cat.Unavailable)
		}
		for _, note := range cat.Notes {
			notes = append(notes, co.prefix(p.name)+note)
		}
	}
	if co.planOf != nil {
		set, gone := tunnel.DiffNames(co.planOf, profiles[0].Names)
		if co.plan.Update(set, gone, co.reserved) {
			for _, name := range gone {
				k := localnames.Key{Profile: 0, Name: name}
				delete(co.byKey, k)
				changed = append(changed, k)
			}
			for _, n := range set {
				k := localnames.Key{Profile: 0, Name: n.Name}
				co.byKey[k] = n
				changed = append(changed, k)
			}
			co.planOf, co.catalogNotes = profiles[0].Names, append(notes, co.plan.Notes...)
			return changed, false
		}
	}
	byKey := map[localnames.Key]tunnel.ClusterName{}
	for i, p := range profiles {
		for _, n := range p.Names {
			byKey[localnames.Key{Profile: i, Name: n.Name}] = n
		}
	}
	co.plan = localnames.PlanHosts(profiles, co.reserved, co.res.Shared())
	co.byKey, co.catalogNotes = byKey, append(notes, co.plan.Notes...)
	co.planOf = nil
	if len(profiles) == 1 {
		co.planOf = profiles[0].Names
	}
	return nil, true
}

// settle gives the names of the plan (lazy: those CMD looked up) their
// addresses and listeners, closes those of names gone, hands the resolver
// the names, and tells the notes that changed. It returns the names given
// to the resolver that the command reaches by a name of their own, and
// the resolver's error.
func (co *consumer) settle() ([]localnames.Key, error) {
	notes := slices.Clone(co.catalogNotes)
	byKey := co.byKey
	planned := maps.Keys(co.plan.Hosts)
	if co.lazy {
		planned = func(yield func(localnames.Key) bool) {
			for k := range co.looked {
				if _, ok := co.plan.Hosts[k]; ok && !yield(k) {
					return
				}
			}
		}
	}
	keys := slices.SortedFunc(planned, compareKeys)
	var lines []localnames.HostLine
	var placed []localnames.Key // the name of each line
	want := map[listenKey]bool{}
	for _, k := range keys {
		addr, ok := co.addrs[k]
		if !ok {
			var err error
			if addr, err = co.pool.Take(); err != nil {
				notes = append(notes, fmt.Sprintf("warning: %s%s does not resolve: %v", co.prefix(co.profiles[k.Profile].name), k.Name, err))
				continue
			}
			co.addrs[k] = addr
		}
		lines = append(lines, localnames.HostLine{Addr: addr, Names: co.plan.Hosts[k]})
		placed = append(placed, k)
		for _, port := range byKey[k].Ports {
			want[listenKey{k, port, false}] = true
		}
		for _, port := range byKey[k].UDPPorts {
			want[listenKey{k, port, true}] = true
		}
	}
	notes = append(notes, co.openListeners(want)...)
	co.lines = lines
	held, err := co.res.Update(lines)
	if err != nil {
		notes = append(notes, fmt.Sprintf("warning: the cluster names could not be updated: %v", err))
	}
	var reached []localnames.Key // the names the command reaches by a name of their own
	for i, k := range placed {
		note, own := co.heldNote(k, lines[i].Names, held)
		if note != "" {
			notes = append(notes, note)
		}
		if own {
			reached = append(reached, k)
		}
	}
	co.tell(notes)
	return reached, err
}

// compareKeys orders names by profile, then name.
func compareKeys(a, b localnames.Key) int {
	if a.Profile != b.Profile {
		return a.Profile - b.Profile
	}
	return strings.Compare(a.Name, b.Name)
}

// heldNote says which cluster the host names of name k that another run
// on this machine published first reach (held, from the resolver): that
// run's, not k's; own reports whether k keeps a host name of its own.
func (co *consumer) heldNote(k localnames.Key, names []string, held map[string]int) (note string, own bool) {
	var taken, kept []string
	pids := map[int]bool{}
	for _, n := range names {
		if pid, ok := held[n]; ok {
			taken, pids[pid] = append(taken, n), true
		} else {
			kept = append(kept, n)
		}
	}
	if len(taken) == 0 {
		return "", true
	}
	runs := make([]string, 0, len(pids))
	for _, pid := range slices.Sorted(maps.Keys(pids)) {
		runs = append(runs, strconv.Itoa(pid))
	}
	profile := co.profiles[k.Profile].name
	reach := fmt.Sprintf("%s's %s is reached as %s", profile, k.Name, strings.Join(kept, ", "))
	if len(kept) == 0 {
		reach = fmt.Sprintf("%s's %s is not reachable by name while that run lasts", profile, k.Name)
	}
	return fmt.Sprintf("warning: %s: another plug run on this machine (process %s) published the name first, and it answers it, with its own cluster, not %s's; %s",
		strings.Join(taken, ", "), strings.Join(runs, ", "), profile, reach), len(kept) > 0
}

// hosts is every name the run's programs reach, as NAME:ADDR, as of now.
func (co *consumer) hosts() []string {
	co.mu.Lock()
	defer co.mu.Unlock()
	var out []string
	for _, l := range co.lines {
		for _, n := range l.Names {
			out = append(out, n+":"+l.Addr.String())
		}
	}
	return out
}

// openListeners closes the listeners no longer wanted and opens the new
// ones, retrying those that failed before. It returns what to tell.
func (co *consumer) openListeners(want map[listenKey]bool) []string {
	for k, l := range co.listeners {
		if !want[k] {
			l.close()
			delete(co.listeners, k)
		}
	}
	for k := range co.failed {
		if !want[k] {
			delete(co.failed, k)
		}
	}
	var privileged, notes []string
	budget := maxListeners - len(co.listeners)
	left := 0
	for _, k := range slices.SortedFunc(maps.Keys(want), compareListenKeys) {
		if co.listeners[k] != nil {
			continue
		}
		if budget == 0 {
			left++
			continue
		}
		p := co.profiles[k.name.Profile]
		label := co.prefix(p.name) + k.name.Name + ":" + strconv.Itoa(k.port)
		target := net.JoinHostPort(k.name.Name, strconv.Itoa(k.port))
		var l closer
		var err error
		if k.udp {
			label += "/udp"
			l, err = listenUDP(co.addrs[k.name], k.port, p.session, target, label, co.refusals.refused, co.flows)
		} else {
			l, err = listen(co.addrs[k.name], k.port, p.session, target, label, co.refusals.refused)
		}
		if err == nil {
			co.listeners[k] = l
			budget--
			if co.failed[k] != "" {
				delete(co.failed, k)
				notes = append(notes, label+" answers now")
			}
			continue
		}
		why := err.Error()
		if co.failed[k] == why {
			continue
		}
		co.failed[k] = why
		var le *listenError
		if errors.As(err, &le) && localnames.IsPrivilegedPort(le.err) {
			privileged = append(privileged, label)
			continue
		}
		notes = append(notes, "warning: "+why)
	}
	if len(privileged) > 0 {
		verb := "does"
		if len(privileged) > 1 {
			verb = "do"
		}
		notes = append(notes, fmt.Sprintf("warning: %s %s not answer: ports below 1024 need the one-time preparation of this machine, sudo plug setup; the other ports answer", strings.Join(privileged, ", "), verb))
	}
	if left > 0 {
		notes = append(notes, fmt.Sprintf("warning: a run listens on at most %d ports; %d more ports of the cluster's names do not answer (a run opens every name at start here because %s)", maxListeners, left, co.eager))
	}
	return notes
}

// tell says each note not said yet; notes that no longer hold may be said
// again when they come back.
func (co *consumer) tell(notes []string) {
	now := map[string]bool{}
	for _, n := range notes {
		if !co.told[n] && !now[n] {
			co.say(n)
		}
		now[n] = true
	}
	co.told = now
}

// tellNames says which names the run's programs reach: all of them the
// first time, then those that came and went.
func (co *consumer) tellNames(keys []localnames.Key) {
	now := map[localnames.Key]bool{}
	var added, gone []string
	for _, k := range keys {
		now[k] = true
		if !co.known[k] {
			added = append(added, co.prefix(co.profiles[k.Profile].name)+k.Name)
		}
	}
	for k := range co.known {
		if !now[k] {
			gone = append(gone, co.prefix(co.profiles[k.Profile].name)+k.Name)
		}
	}
	first := !co.started
	co.known, co.started = now, true
	switch {
	case first && len(added) == 0:
		co.say("the command reaches the cluster's names as they appear; none yet")
	case first:
		co.say(fmt.Sprintf("the command reaches %d cluster name(s) by name: %s", len(added), shortList(added)))
	default:
		co.tellCameAndWent(added, gone)
	}
}

// tellChanged says which of keys, the names that changed since the last
// reconcile, the run's programs now reach by a host name of their own
// (lazy: once looked up), and which they no longer do.
func (co *consumer) tellChanged(keys []localnames.Key) {
	var added, gone []string
	for _, k := range keys {
		label := co.prefix(co.profiles[k.Profile].name) + k.Name
		switch own := len(co.plan.Hosts[k]) > 0; {
		case own && !co.known[k]:
			co.known[k] = true
			added = append(added, label)
		case !own && co.known[k]:
			delete(co.known, k)
			gone = append(gone, label)
		}
	}
	slices.Sort(added)
	co.tellCameAndWent(added, gone)
}

// tellCameAndWent says which names came to the cluster and which went.
func (co *consumer) tellCameAndWent(added, gone []string) {
	slices.Sort(gone)
	if len(added) > 0 {
		co.say("new in the cluster: " + shortList(added))
	}
	if len(gone) > 0 {
		co.say("gone from the cluster: " + shortList(gone))
	}
}

// prefix labels a line about a profile when the run has several.
func (co *consumer) prefix(profile string) string {
	if len(co.profiles) < 2 {
		return ""
	}
	return profile + ": "
}

// shortList joins the first few items, saying how many more there are.
func shortList(items []string) string {
	if len(items) <= namesShown {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:namesShown], ", "), len(items)-namesShown)
}

// machineNames are the names the run never shadows: localhost and this
// machine's host name.
func machineNames() []string {
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		h = strings.ToLower(h)
		short, _, _ := strings.Cut(h, ".")
		names = append(names, h, short)
	}
	return names
}

func compareListenKeys(a, b listenKey) int {
	switch {
	case a.name.Profile != b.name.Profile:
		return a.name.Profile - b.name.Profile
	case a.name.Name != b.name.Name:
		return strings.Compare(a.name.Name, b.name.Name)
	case a.port != b.port:
		return a.port - b.port
	case a.udp == b.udp:
		return 0
	case b.udp:
		return -1
	}
	return 1
}
