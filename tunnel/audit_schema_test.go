package tunnel_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"plug/tunnel"
)

// auditCommon are the fields of every line, documented once above the
// table.
var auditCommon = []string{"schema", "time", "event", "agent"}

// documentedAudit reads deploy/README.md's audit schema: each event's
// documented fields (every backquoted word of its row's last column), and
// the section's whole text.
func documentedAudit(t *testing.T) (rows map[string][]string, section string) {
	t.Helper()
	raw, err := os.ReadFile("../deploy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## The audit trail\n")
	end := strings.Index(doc[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal(`deploy/README.md has no section "## The audit trail"`)
	}
	section = doc[start : start+1+end]
	if !strings.Contains(section, "### The schema, version "+strconv.Itoa(tunnel.AuditSchema)+"\n") {
		t.Errorf("the documented schema is not version %d", tunnel.AuditSchema)
	}
	quoted := regexp.MustCompile("`([^`]+)`")
	rows = map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) != 3 || strings.HasPrefix(line, "| `event`") {
			continue
		}
		var fields []string
		for _, m := range quoted.FindAllStringSubmatch(cells[2], -1) {
			fields = append(fields, m[1])
		}
		for _, m := range quoted.FindAllStringSubmatch(cells[0], -1) {
			rows[m[1]] = fields
		}
	}
	return rows, section
}

// emittedAudit reads the package's code: the value of each Audit*
// constant naming an event, the End* constants, and, for each event, the
// AuditEvent fields (Go names) the code may set on a line of it: those of
// a literal whose Event is that constant, and of a variable holding an
// AuditEvent whose Event it assigns, with every field the function
// assigns to it.
func emittedAudit(t *testing.T) (events map[string]string, ends []string, fields map[string][]string) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	events = map[string]string{}
	fields = map[string][]string{}
	var files []*ast.File
	for _, f := range pkgs["tunnel"].Files {
		files = append(files, f)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, name := range v.Names {
					lit, ok := valueAt(v.Values, i).(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					value, _ := strconv.Unquote(lit.Value)
					switch {
					case strings.HasPrefix(name.Name, "Audit") && strings.Contains(value, "."):
						events[name.Name] = value
					case strings.HasPrefix(name.Name, "End"):
						ends = append(ends, value)
					}
				}
			}
		}
	}
	isAuditEvent := func(e ast.Expr) (*ast.CompositeLit, bool) {
		lit, ok := e.(*ast.CompositeLit)
		if !ok {
			return nil, false
		}
		id, ok := lit.Type.(*ast.Ident)
		return lit, ok && id.Name == "AuditEvent"
	}
	add := func(names []string, set []string) {
		for _, n := range names {
			if v, ok := events[n]; ok {
				fields[v] = append(fields[v], set...)
			}
		}
	}
	constsIn := func(e ast.Node) []string {
		var out []string
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if _, known := events[id.Name]; known {
					out = append(out, id.Name)
				}
			}
			return true
		})
		return out
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			held := map[string]*ast.CompositeLit{} // variables holding a literal
			seen := map[*ast.CompositeLit]bool{}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
					if lit, ok := isAuditEvent(as.Rhs[0]); ok {
						if id, ok := as.Lhs[0].(*ast.Ident); ok {
							held[id.Name], seen[lit] = lit, true
						}
					}
				}
				return true
			})
			for name, lit := range held {
				var names, set []string
				for _, el := range lit.Elts {
					kv := el.(*ast.KeyValueExpr)
					key := kv.Key.(*ast.Ident).Name
					if key == "Event" {
						names = append(names, constsIn(kv.Value)...)
					} else {
						set = append(set, key)
					}
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					as, ok := n.(*ast.AssignStmt)
					if !ok {
						return true
					}
					for i, l := range as.Lhs {
						sel, ok := l.(*ast.SelectorExpr)
						if !ok {
							continue
						}
						if id, ok := sel.X.(*ast.Ident); !ok || id.Name != name {
							continue
						}
						if sel.Sel.Name == "Event" {
							names = append(names, constsIn(valueAt(as.Rhs, i))...)
						} else {
							set = append(set, sel.Sel.Name)
						}
					}
					return true
				})
				add(names, set)
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok || seen[lit] {
					return true
				}
				if _, ok := isAuditEvent(lit); !ok {
					return true
				}
				var names, set []string
				for _, el := range lit.Elts {
					kv := el.(*ast.KeyValueExpr)
					if key := kv.Key.(*ast.Ident).Name; key == "Event" {
						names = constsIn(kv.Value)
					} else {
						set = append(set, key)
					}
				}
				add(names, set)
				return true
			})
		}
	}
	return events, ends, fields
}

func valueAt(list []ast.Expr, i int) ast.Expr {
	if len(list) == 1 {
		return list[0]
	}
	if i < len(list) {
		return list[i]
	}
	return nil
}

// The audit schema of deploy/README.md is the code's: every event the code
// names is documented and every documented one exists; every field the
// code may write on an event is in that event's row; every field of
// AuditEvent is documented; every way a run ends is named.
func TestAuditSchemaIsDocumented(t *testing.T) {
	rows, section := documentedAudit(t)
	events, ends, fields := emittedAudit(t)
	if len(events) < 20 || len(fields) < 15 {
		t.Fatalf("the code's audit events were not found: %d constants, %d with fields", len(events), len(fields))
	}
	jsonName := map[string]string{}
	typ := reflect.TypeFor[tunnel.AuditEvent]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		jsonName[typ.Field(i).Name] = name
		documented := slices.Contains(auditCommon, name)
		for _, f := range rows {
			documented = documented || slices.Contains(f, name)
		}
		if !documented {
			t.Errorf("the field %q (AuditEvent.%s) is in no row of the schema", name, typ.Field(i).Name)
		}
	}
	for constant, event := range events {
		if _, ok := rows[event]; !ok {
			t.Errorf("the event %q (%s) is not documented", event, constant)
		}
	}
	for event := range rows {
		if !slices.Contains(slices.Collect(maps.Values(events)), event) {
			t.Errorf("the schema documents %q, which the code does not write", event)
		}
	}
	for event, set := range fields {
		for _, goName := range set {
			name := jsonName[goName]
			if !slices.Contains(auditCommon, name) && !slices.Contains(rows[event], name) {
				t.Errorf("the code may write %q on %q, which its row does not list (it lists %q)", name, event, rows[event])
			}
		}
	}
	for _, how := range ends {
		if !strings.Contains(section, "`"+how+"`") {
			t.Errorf("the schema does not say what how %q means", how)
		}
	}
}
