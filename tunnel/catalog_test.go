package tunnel

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestCatalogFramesReassemble sends a catalog too large for one control
// frame and reads it back, as the client does: with every alias, and with
// the aliases as forms, which cost a fraction of the bytes; a name whose
// aliases do not follow from it keeps them.
func TestCatalogFramesReassemble(t *testing.T) {
	var names []ClusterName
	for i := range 3000 {
		name := fmt.Sprintf("service-%04d", i)
		names = append(names, ClusterName{Name: name, Aliases: []string{name + ".shop", name + ".shop.svc", name + ".shop.svc.cluster.local"}, Ports: []int{80, 8080, 9000 + i}})
	}
	names = append(names, ClusterName{Name: "stack_web", Aliases: []string{"web"}, Ports: []int{80}}, ClusterName{Name: "db.other", Aliases: []string{"db.other.svc", "db.other.svc.cluster.local"}, Ports: []int{5432}})
	want := normalize(Catalog{Names: names, Notes: []string{"a note"}})
	size := map[bool]int{}
	for _, withForms := range []bool{false, true} {
		var buf bytes.Buffer
		c := &controlConn{rw: nopCloser{&buf}}
		frames := catalogFrames(want, withForms)
		if len(frames) < 2 {
			t.Fatalf("%d names went into %d message(s); want several", len(names), len(frames))
		}
		for _, m := range frames {
			if err := c.send(m); err != nil {
				t.Fatalf("sending a catalog message: %v", err)
			}
		}
		size[withForms] = buf.Len()
		cc := &clientConn{s: &Session{}}
		for range frames {
			typ, frame, err := c.receive()
			if err != nil || typ != typeCatalog {
				t.Fatalf("received %q, %v", typ, err)
			}
			if _, known, _ := cc.s.Catalog(); known {
				t.Fatal("the catalog was taken before its last message")
			}
			m, err := decodeMsg[catalogMsg](frame)
			if err != nil {
				t.Fatal(err)
			}
			cc.takeCatalog(m)
		}
		got, known, _ := cc.s.Catalog()
		if !known || !reflect.DeepEqual(got, want) {
			t.Fatalf("with forms %v, the reassembled catalog differs: %d names, notes %q", withForms, len(got.Names), got.Notes)
		}
	}
	t.Logf("%d names: %d bytes with every alias, %d with forms", len(names), size[false], size[true])
	if size[true]*2 > size[false] {
		t.Fatalf("with forms the catalog took %d bytes, without %d; want less than half", size[true], size[false])
	}
}

// TestCatalogFormsTheRunCannotUse: a name whose form its catalog lacks, or
// whose form makes an alias too long, is left out with a note; a catalog
// with a malformed list of forms is refused.
func TestCatalogFormsTheRunCannotUse(t *testing.T) {
	long := "." + strings.Repeat("x", maxHostLen-2) // a valid ending, too long after "db"
	frame := `{"type":"catalog","forms":[[".shop",".shop.svc"],["` + long + `"]],"names":[` +
		`{"name":"web","form":1,"ports":[80]},` +
		`{"name":"api","form":3,"ports":[80]},` +
		`{"name":"db","form":2,"ports":[5432]}]}`
	m, err := decodeMsg[catalogMsg]([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	cc := &clientConn{s: &Session{}}
	cc.takeCatalog(m)
	got, _, _ := cc.s.Catalog()
	if len(got.Names) != 1 || !reflect.DeepEqual(got.Names[0].Aliases, []string{"web.shop", "web.shop.svc"}) {
		t.Fatalf("kept %+v; want web with its two aliases", got.Names)
	}
	if len(got.Notes) != 1 || !strings.Contains(got.Notes[0], "2 name(s) this run cannot use") || !strings.Contains(got.Notes[0], "api, db") {
		t.Fatalf("notes: %q", got.Notes)
	}
	for _, bad := range []string{
		`{"forms":[[]],"names":[]}`,
		`{"forms":[[""]],"names":[]}`,
		`{"forms":[[".a"]],"names":[{"name":"web","form":1,"aliases":["web.b"],"ports":[80]}],"notes":[]}`,
	} {
		m, err := decodeMsg[catalogMsg]([]byte(bad))
		if err == nil && len(m.Names) > 0 {
			t.Fatalf("%s was taken: %+v", bad, m)
		}
	}
}

// TestNormalize sorts, removes duplicate and invalid ports, and cuts a
// name with more ports than runs are told about, saying so.
func TestNormalize(t *testing.T) {
	many := make([]int, 0, MaxNamePorts+100)
	for p := 1; p <= MaxNamePorts+100; p++ {
		many = append(many, p)
	}
	got := normalize(Catalog{Names: []ClusterName{
		{Name: "web", Ports: []int{8080, 80, 80, 0, 70000}},
		{Name: "big", Ports: many},
	}})
	if got.Names[0].Name != "big" || len(got.Names[0].Ports) != MaxNamePorts {
		t.Fatalf("big: %s with %d ports", got.Names[0].Name, len(got.Names[0].Ports))
	}
	if !reflect.DeepEqual(got.Names[1].Ports, []int{80, 8080}) {
		t.Fatalf("web's ports: %v", got.Names[1].Ports)
	}
	if len(got.Notes) != 1 || !strings.Contains(got.Notes[0], "big has 4196 ports; runs are told the first 4096") {
		t.Fatalf("notes: %q", got.Notes)
	}
}

// TestDecodeCatalogKeepsGoodNames leaves out what a run cannot use, with a
// note, and keeps the rest.
func TestDecodeCatalogKeepsGoodNames(t *testing.T) {
	frame := `{"type":"catalog","names":[` +
		`{"name":"web","aliases":["web.shop"],"ports":[80]},` +
		`{"name":"","ports":[80]},` +
		`{"name":"bad-port","ports":[0]},` +
		`{"name":"` + strings.Repeat("x", 300) + `","ports":[80]}],"unavailable":"\u001b[31mred"}`
	m, err := decodeMsg[catalogMsg]([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Names) != 1 || m.Names[0].Name != "web" {
		t.Fatalf("kept %+v", m.Names)
	}
	if len(m.Notes) != 3 || !strings.Contains(m.Notes[1], "bad-port has port 0") {
		t.Fatalf("notes: %q", m.Notes)
	}
	if strings.ContainsRune(m.Unavailable, 0x1b) {
		t.Fatalf("a terminal escape passed: %q", m.Unavailable)
	}
	if _, err := decodeMsg[catalogMsg]([]byte(`{"names":"web"}`)); err == nil {
		t.Fatal("a catalog whose names are not a list was accepted")
	}
}

func FuzzDecodeCatalog(f *testing.F) {
	f.Add([]byte(`{"type":"catalog","names":[{"name":"web","aliases":["web.ns"],"ports":[80,443]}],"more":true,"notes":["n"]}`))
	f.Add([]byte(`{"names":[{"name":"","ports":[99999]}],"unavailable":"x"}`))
	f.Add([]byte(`{"forms":[[".ns",".ns.svc"]],"names":[{"name":"web","form":1,"ports":[80]},{"name":"db","form":2,"ports":[5432]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMsg[catalogMsg](data)
		if err != nil {
			return
		}
		if len(m.Notes) > maxCatalogNotes+len(m.Names)+1 {
			t.Fatalf("%d notes", len(m.Notes))
		}
		for _, n := range m.Names {
			if why := badCatalogName(n); why != "" {
				t.Fatalf("kept a bad name: %s", why)
			}
		}
	})
}

// TestCatalogFeedTellsChanges: a run that takes deltas is told the whole
// catalog once (its aliases as forms if it takes them), then only the
// names that changed, and ends with the same catalog as the agent's; names plug keeps to itself (Unlisted) are never
// told; a run that does not take deltas, or fell further behind than the
// changes kept, gets the whole catalog.
func TestCatalogFeedTellsChanges(t *testing.T) {
	var f catalogFeed
	cc := &clientConn{s: &Session{}}
	updateKind := func(since uint64, deltas, withForms bool) ([]catalogMsg, uint64) {
		t.Helper()
		frames, v, _ := f.update(since, deltas, withForms)
		var msgs []catalogMsg
		for _, b := range frames {
			m, err := decodeMsg[catalogMsg](b[4:])
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
		return msgs, v
	}
	update := func(since uint64, deltas bool) ([]catalogMsg, uint64) {
		t.Helper()
		return updateKind(since, deltas, false)
	}
	take := func(msgs []catalogMsg) {
		t.Helper()
		for _, m := range msgs {
			cc.takeCatalog(m)
		}
	}
	name := func(n string, port int) ClusterName {
		return ClusterName{Name: n, Aliases: []string{n + ".shop"}, Ports: []int{port}}
	}
	helper := ClusterName{Name: "plug-vol-1", Ports: []int{445}, Unlisted: true}
	f.set(normalize(Catalog{Names: []ClusterName{name("web", 80), name("api", 9000), helper}}))
	msgs, v1 := update(0, true)
	if len(msgs) != 1 || msgs[0].Delta || len(msgs[0].Names) != 2 {
		t.Fatalf("the first catalog: %+v; want the whole catalog, 2 names, without the volume helper", msgs)
	}
	take(msgs)
	if formed, _ := updateKind(0, true, true); len(formed) != 1 || !reflect.DeepEqual(formed[0].Forms, [][]string{{".shop"}}) || formed[0].Names[0].Form != 1 || len(formed[0].Names[0].Aliases) != 0 {
		t.Fatalf("the first catalog with forms: %+v", formed)
	}

	f.set(normalize(Catalog{Names: []ClusterName{name("web", 8080), name("db", 5432), helper}, Notes: []string{"a note"}}))
	msgs, v2 := update(v1, true)
	want := catalogMsg{Delta: true, Notes: []string{"a note"}, Names: []catalogName{{Name: "db", Aliases: []string{"db.shop"}, Ports: []int{5432}}, {Name: "web", Aliases: []string{"web.shop"}, Ports: []int{8080}}}, Gone: []string{"api"}}
	if len(msgs) != 1 || !reflect.DeepEqual(msgs[0], want) {
		t.Fatalf("the change: %+v; want %+v", msgs, want)
	}
	take(msgs)
	if got, _, _ := cc.s.Catalog(); !reflect.DeepEqual(got, Catalog{Names: []ClusterName{name("db", 5432), name("web", 8080)}, Notes: []string{"a note"}}) {
		t.Fatalf("the run's catalog after the change: %+v", got)
	}
	if msgs, v := update(v2, true); len(msgs) != 0 || v != v2 {
		t.Fatalf("a current run was told %+v", msgs)
	}
	if msgs, _ := update(v1, false); len(msgs) != 1 || msgs[0].Delta || len(msgs[0].Names) != 2 {
		t.Fatalf("a run without deltas was told %+v; want the whole catalog", msgs)
	}
	for i := range maxCatalogChanges + 1 {
		f.set(normalize(Catalog{Names: []ClusterName{name("web", 8080), name("db", 6000+i)}}))
	}
	if msgs, _ := update(v2, true); len(msgs) != 1 || msgs[0].Delta {
		t.Fatalf("a run behind every kept change was told %+v; want the whole catalog", msgs)
	}
}

// TestApplyNames: a change adds, replaces and removes names, whatever
// order the agent sent them in, and the run's names stay sorted, each once.
func TestApplyNames(t *testing.T) {
	n := func(name string, port int) ClusterName { return ClusterName{Name: name, Ports: []int{port}} }
	names := []ClusterName{n("api", 1), n("db", 2), n("web", 3)}
	got := applyNames(names, []ClusterName{n("zed", 4), n("db", 5), n("app", 6), n("zed", 7), n("gone", 8)}, []string{"web", "gone", "nothing"})
	want := []ClusterName{n("api", 1), n("app", 6), n("db", 5), n("zed", 7)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := sortedNames([]ClusterName{n("b", 1), n("a", 2), n("b", 3)}); !reflect.DeepEqual(got, []ClusterName{n("a", 2), n("b", 3)}) {
		t.Fatalf("sortedNames: %+v", got)
	}
}
