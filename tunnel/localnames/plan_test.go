package localnames

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"plug/tunnel"
)

func k8sName(name, ns string, ports ...int) tunnel.ClusterName {
	return tunnel.ClusterName{Name: name, Aliases: []string{name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"}, Ports: ports}
}

func TestPlanHostsOneProfile(t *testing.T) {
	plan := PlanHosts([]Profile{{Name: "prod", Names: []tunnel.ClusterName{
		k8sName("web", "shop", 80),
		{Name: "Shop_API", Aliases: []string{"api"}, Ports: []int{80}},
		{Name: "bad name!", Ports: []int{80}},
		k8sName("laptop", "shop", 22),
	}}}, []string{"localhost", "laptop"}, false)
	want := map[Key][]string{
		{0, "web"}:      {"web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local"},
		{0, "Shop_API"}: {"shop_api", "api"},
		{0, "laptop"}:   {"laptop.shop", "laptop.shop.svc", "laptop.shop.svc.cluster.local"},
	}
	if !reflect.DeepEqual(plan.Hosts, want) {
		t.Fatalf("hosts:\n%v\nwant\n%v", plan.Hosts, want)
	}
	notes := strings.Join(plan.Notes, "\n")
	for _, w := range []string{`"bad name!" is not a valid host name: it contains ' '`, "laptop is left out: it is a name of this machine"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
}

// TestPlanHostsClash: with two profiles, a shared name goes to the first
// -p, the other is reached as NAME.PROFILE, and the clash is told once.
func TestPlanHostsClash(t *testing.T) {
	plan := PlanHosts([]Profile{
		{Name: "prod", Names: []tunnel.ClusterName{k8sName("web", "shop", 80), k8sName("db", "shop", 5432)}},
		{Name: "Staging", Names: []tunnel.ClusterName{k8sName("web", "shop", 8080), k8sName("cache", "infra", 6379)}},
	}, nil, false)
	if got := plan.Hosts[Key{0, "web"}]; !reflect.DeepEqual(got, []string{"web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local", "web.prod"}) {
		t.Errorf("prod's web: %v", got)
	}
	if got := plan.Hosts[Key{1, "web"}]; !reflect.DeepEqual(got, []string{"web.staging"}) {
		t.Errorf("staging's web: %v", got)
	}
	if got := plan.Hosts[Key{1, "cache"}]; !reflect.DeepEqual(got, []string{"cache", "cache.infra", "cache.infra.svc", "cache.infra.svc.cluster.local", "cache.staging"}) {
		t.Errorf("staging's cache: %v", got)
	}
	want := "web, web.shop, web.shop.svc, web.shop.svc.cluster.local are names in profiles prod and Staging: they reach prod's; Staging's is reached as web.staging"
	if len(plan.Notes) != 1 || plan.Notes[0] != want {
		t.Fatalf("notes %q\nwant %q", plan.Notes, want)
	}
}

func TestCheckHostName(t *testing.T) {
	for _, ok := range []string{"web", "web.shop.svc.cluster.local", "shop_web", "a-1", strings.Repeat("a", 63)} {
		if err := checkHostName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-web", "web-", "web..shop", "Web", "web!", "web shop", strings.Repeat("a", 64), strings.Repeat("a.", 127) + "a"} {
		if checkHostName(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestHostsTextPutsTheRunsNamesFirst(t *testing.T) {
	text := string(hostsText("pid 1", []HostLine{{netip.MustParseAddr("127.64.0.1"), []string{"web", "web.shop"}}}, []byte("127.0.0.1 localhost\n::1 localhost")))
	want := "# The cluster names of plug run pid 1, seen only by the programs it started.\n" +
		"127.64.0.1\tweb web.shop\n" +
		"# This machine's own hosts file:\n" +
		"127.0.0.1 localhost\n::1 localhost\n"
	if text != want {
		t.Fatalf("got\n%s\nwant\n%s", text, want)
	}
}

// TestPlanUpdateIsThePlanOfTheNewNames: a plan of one profile brought up
// to date by Update, change after change, is the plan PlanHosts makes of
// the names as they are then, notes included; Update declines (and the
// plan is made anew) only when a host name several names have is at
// stake, and takes a Kubernetes namespace's changes.
func TestPlanUpdateIsThePlanOfTheNewNames(t *testing.T) {
	reserved := []string{"localhost", "laptop"}
	pool := []tunnel.ClusterName{
		k8sName("web", "shop", 80),
		k8sName("api", "shop", 80),
		k8sName("laptop", "shop", 22),
		{Name: "bad name!", Ports: []int{80}},
		{Name: "db", Aliases: []string{"db.shop", "DB.other"}, Ports: []int{5432}},
		{Name: "db2", Aliases: []string{"db.shop"}, Ports: []int{5432}}, // wants db's alias
		{Name: "web", Aliases: []string{"www"}, Ports: []int{8080}},     // web changed
		k8sName("zed", "shop", 9000),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var names []tunnel.ClusterName
	plan := PlanHosts([]Profile{{Name: "p", Names: names}}, reserved, false)
	updated := 0
	for step := range 400 {
		byName := map[string]tunnel.ClusterName{}
		for _, n := range names {
			byName[n.Name] = n
		}
		for range 1 + rng.IntN(3) {
			n := pool[rng.IntN(len(pool))]
			if _, ok := byName[n.Name]; ok && rng.IntN(2) == 0 {
				delete(byName, n.Name)
			} else {
				byName[n.Name] = n
			}
		}
		next := slices.SortedFunc(maps.Values(byName), func(a, b tunnel.ClusterName) int { return strings.Compare(a.Name, b.Name) })
		set, gone := tunnel.DiffNames(names, next)
		names = next
		want := PlanHosts([]Profile{{Name: "p", Names: names}}, reserved, false)
		if !plan.Update(set, gone, reserved) {
			plan = want
			continue
		}
		updated++
		if !reflect.DeepEqual(plan.Hosts, want.Hosts) || !reflect.DeepEqual(plan.Owner, want.Owner) || !reflect.DeepEqual(plan.Notes, want.Notes) {
			t.Fatalf("step %d, names %v: updated plan\n%+v\nwant\n%+v", step, names, plan, want)
		}
	}
	if updated < 100 {
		t.Fatalf("Update took %d of 400 changes", updated)
	}

	var shop []tunnel.ClusterName
	for i := range 1000 {
		shop = append(shop, k8sName(fmt.Sprintf("svc-%04d", i), "shop", 80))
	}
	plan = PlanHosts([]Profile{{Name: "p", Names: shop}}, reserved, false)
	fresh := k8sName("fresh", "shop", 80)
	if !plan.Update([]tunnel.ClusterName{fresh}, []string{"svc-0001"}, reserved) || plan.Owner["fresh.shop.svc"] != (Key{0, "fresh"}) || len(plan.Hosts[Key{0, "svc-0001"}]) != 0 {
		t.Fatalf("a namespace's change was not taken: %v, %v", plan.Owner["fresh.shop.svc"], plan.Hosts[Key{0, "svc-0001"}])
	}
	if two := PlanHosts([]Profile{{Name: "a"}, {Name: "b"}}, reserved, false); two.Update([]tunnel.ClusterName{fresh}, nil, reserved) {
		t.Fatal("Update took a change of a plan of two profiles")
	}
}
