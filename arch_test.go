package rtsandbox_test

// The architecture test: every "never" rule of docs/architecture.md, "Import rules", about who
// may import whom, checked on the source of the whole module (tests
// excluded: a test may use any fake). A failure names the package, the
// import and the rule it breaks.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/rtsandbox/rtsandbox"

// pkgImports is one package of the module: its directory relative to the
// module root ("." for the root) and the imports of its non-test files.
type pkgImports struct {
	dir     string
	imports map[string]bool
	files   []*ast.File
}

// loadModule parses every non-test Go file under the module root.
func loadModule(t *testing.T) map[string]*pkgImports {
	t.Helper()
	pkgs := map[string]*pkgImports{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			// A directory with its own go.mod is another module (the
			// tools modules under tools/): not this one's code.
			if _, err := os.Stat(filepath.Join(p, "go.mod")); p != "." && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(p))
		pk := pkgs[dir]
		if pk == nil {
			pk = &pkgImports{dir: dir, imports: map[string]bool{}}
			pkgs[dir] = pk
		}
		pk.files = append(pk.files, f)
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			pk.imports[ip] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages; the test must run from the module root", len(pkgs))
	}
	return pkgs
}

// local is the module-relative directory of import path ip ("." for the
// root), or "" when ip is outside the module.
func local(ip string) string {
	switch {
	case ip == modulePath:
		return "."
	case strings.HasPrefix(ip, modulePath+"/"):
		return strings.TrimPrefix(ip, modulePath+"/")
	}
	return ""
}

// std reports whether ip is a standard-library import.
func std(ip string) bool {
	first, _, _ := strings.Cut(ip, "/")
	return !strings.Contains(first, ".")
}

// under reports whether dir is one of dirs or below one of them.
func under(dir string, dirs ...string) bool {
	for _, d := range dirs {
		if dir == d || strings.HasPrefix(dir, d+"/") {
			return true
		}
	}
	return false
}

// The worker side: what runs inside the container. skills holds the
// rules of read_skill and tool gating the worker enforces (its YAML
// loader, skills/skilltree, is the host's).
var workerSide = []string{".", "wire", "worker", "cmd/rtsandbox-worker", "brokerclient", "jsonjs", "skills", "internal/privdir", "internal/subpath"}

// wiring are the only packages that put the others together.
var wiring = []string{"cmd", "host"}

// importRule is one rule: for every package matching who, every import
// must pass allowed; why is the rule's text from docs/architecture.md.
type importRule struct {
	name    string
	who     func(dir string) bool
	allowed func(dir, ip string) bool
	why     string
}

func archRules() []importRule {
	notModule := func(_, ip string) bool { return local(ip) == "" }
	return []importRule{{
		name:    "root imports nothing of the module",
		who:     func(dir string) bool { return dir == "." },
		allowed: notModule,
		why:     "the root package is the shared contract and imports nothing of this module",
	}, {
		name: "worker side: root, wire, jsonjs, brokerclient, skills, privdir, subpath and the standard library only",
		who:  func(dir string) bool { return slices.Contains(workerSide, dir) },
		allowed: func(_, ip string) bool {
			if l := local(ip); l != "" {
				return slices.Contains(workerSide, l)
			}
			return std(ip) && !slices.Contains([]string{"os/exec", "unsafe", "net/http/pprof"}, ip)
		},
		why: "the worker side imports only the root package, each other (wire, jsonjs, brokerclient, skills, internal/privdir, internal/subpath) and the standard library, never os/exec, unsafe or net/http/pprof",
	}, {
		name: "broker knows no surface, router, container or runtime",
		who:  func(dir string) bool { return dir == "broker" },
		allowed: func(_, ip string) bool {
			return !under(local(ip), "surface", "router", "container", "sealed", "session", "host", "cmd")
		},
		why: "broker/ knows no surface, router, container or runtime",
	}, {
		name: "surfaces know the router and root only",
		who:  func(dir string) bool { return under(dir, "surface") },
		allowed: func(_, ip string) bool {
			l := local(ip)
			return l == "" || l == "." || l == "router" || l == "chunk" || under(l, "internal/wait", "internal/privdir")
		},
		why: "surfaces know the router and root only (plus the chunk leaf and internal helpers)",
	}, {
		name: "router knows runtimes through an interface",
		who:  func(dir string) bool { return dir == "router" },
		allowed: func(_, ip string) bool {
			return !under(local(ip), "sealed", "session", "container", "broker", "surface", "host", "cmd", "config", "upstream", "door")
		},
		why: "the router knows runtimes through a small interface, no surface, and no credential (the door is an interface too)",
	}, {
		name: "only cmd and host wire",
		who:  func(dir string) bool { return !under(dir, wiring...) },
		allowed: func(_, ip string) bool {
			return !under(local(ip), "cmd", "host", "config", "surface", "container/docker", "workerimage", "metrics")
		},
		why: "only cmd/ and host/ wire packages together: config, surfaces, the Docker driver, the worker image and metrics are put together there",
	}, {
		name: "nothing imports cmd",
		who:  func(string) bool { return true },
		allowed: func(dir, ip string) bool {
			return !under(local(ip), "cmd")
		},
		why: "cmd/ is the top of the tree",
	}, {
		name: "fakes stay out of production code",
		who:  func(dir string) bool { return !under(dir, "internal", "cmd") },
		allowed: func(_, ip string) bool {
			l := local(ip)
			return !under(l, "internal/fakemodel", "internal/fakediscord", "internal/fakeruntime", "internal/dockertest", "internal/syncbuf", "internal/chunkread", "internal/skilltest", "internal/sqlitelock", "internal/runtimetest", "internal/heappeak", "internal/hostbin", "internal/k8stest")
		},
		why: "fakes live under internal/ and are used by tests (and the operator's stand-in model command) only",
	}, {
		name: "the engine conformance suite is test support",
		who:  func(string) bool { return true },
		allowed: func(_, ip string) bool {
			return !under(local(ip), "container/enginetest")
		},
		why: "container/enginetest is the suite every engine's tests run; only _test files import it",
	}}
}

func TestArchitectureImports(t *testing.T) {
	pkgs := loadModule(t)
	for _, r := range archRules() {
		for dir, pk := range pkgs {
			if !r.who(dir) {
				continue
			}
			for ip := range pk.imports {
				// A package may always import itself and its own subpackages'
				// helpers named internal below it.
				if l := local(ip); l != "" && under(l, dir+"/internal") {
					continue
				}
				if !r.allowed(dir, ip) {
					t.Errorf("%s imports %s: rule %q: %s", dir, ip, r.name, r.why)
				}
			}
		}
	}
}

// TestArchitectureRulesBite proves each rule refuses what it names, so a
// rule that can never fail does not pass for one.
func TestArchitectureRulesBite(t *testing.T) {
	bad := map[string][2]string{
		"root imports nothing of the module": {".", modulePath + "/access"},
		"worker side: root, wire, jsonjs, brokerclient, skills, privdir, subpath and the standard library only": {"worker", "os/exec"},
		"broker knows no surface, router, container or runtime":                                                 {"broker", modulePath + "/router"},
		"surfaces know the router and root only":                                                                {"surface/httpapi", modulePath + "/sealed"},
		"router knows runtimes through an interface":                                                            {"router", modulePath + "/sealed"},
		"only cmd and host wire":                                                                                {"sealed", modulePath + "/config"},
		"nothing imports cmd":                                                                                   {"host", modulePath + "/cmd/rtsandbox"},
		"fakes stay out of production code":                                                                     {"broker", modulePath + "/internal/fakemodel"},
		"the engine conformance suite is test support":                                                          {"host", modulePath + "/container/enginetest"},
	}
	rules := archRules()
	if len(bad) != len(rules) {
		t.Fatalf("%d rules, %d bad examples: give every rule one", len(rules), len(bad))
	}
	for _, r := range rules {
		ex, ok := bad[r.name]
		if !ok {
			t.Errorf("rule %q has no bad example", r.name)
			continue
		}
		if !r.who(ex[0]) || r.allowed(ex[0], ex[1]) {
			t.Errorf("rule %q lets %s import %s", r.name, ex[0], ex[1])
		}
	}
}

// TestRouterNeverTypeAssertsRuntime: the router drives every mode through
// the one runtime interface (rtsandbox.Runtime) and never asks a runtime
// what else it is: no type assertion or type switch in router/ names a
// runtime, as operand or as type.
func TestRouterNeverTypeAssertsRuntime(t *testing.T) {
	pk := loadModule(t)["router"]
	if pk == nil {
		t.Fatal("no router package")
	}
	for _, f := range pk.files {
		for _, bad := range runtimeAssertions(f) {
			t.Errorf("router: %s: the router never type-asserts a runtime", bad)
		}
	}
}

func TestRuntimeAssertionRuleBites(t *testing.T) {
	for src, want := range map[string]int{
		"package p\nfunc f(r any) { _, _ = r.(Runtime) }\ntype Runtime interface{}":            1,
		"package p\ntype c struct{ runtime any }\nfunc (x c) f() { _, _ = x.runtime.(error) }": 1,
		"package p\nfunc f(runtime any) { switch runtime.(type) {} }":                          1,
		"package p\nfunc f(s any) { _, _ = s.(error) }":                                        0,
		"package p\nimport \"runtime\"\nfunc f(p any) { _, _ = p.(runtime.Error) }":            0,
	} {
		f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(runtimeAssertions(f)); got != want {
			t.Errorf("runtimeAssertions(%q) = %d; want %d", src, got, want)
		}
	}
}

// runtimeAssertions lists the type assertions of f whose operand or type
// mentions a runtime ("runtime" in any case); a type switch's "type" is
// read as its operand. A type of the standard library's runtime package
// (runtime.Error, which a recovered panic may be) is no mode's runtime.
func runtimeAssertions(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		ta, ok := n.(*ast.TypeAssertExpr)
		if !ok {
			return true
		}
		x, typ := exprString(ta.X), exprString(ta.Type)
		if strings.HasPrefix(typ, "runtime.") {
			typ = ""
		}
		if strings.Contains(strings.ToLower(x+" "+typ), "runtime") {
			out = append(out, x+".("+typ+")")
		}
		return true
	})
	return out
}

// exprString prints the identifiers and selectors of e ("" for others,
// such as the nil Type of a type switch).
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	}
	return ""
}

// TestNoExportedMutableGlobals: an exported package-level variable holding
// a slice, map or struct literal can be changed by any importer (tool
// declarations, command lists); such values are functions or constants.
// Sentinel errors and compiled patterns are not composite literals.
func TestNoExportedMutableGlobals(t *testing.T) {
	for dir, pk := range loadModule(t) {
		for _, f := range pk.files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if !name.IsExported() || i >= len(vs.Values) {
							continue
						}
						if _, ok := vs.Values[i].(*ast.CompositeLit); ok {
							t.Errorf("%s: exported variable %s holds a composite literal; make it a function or a constant", path.Join(dir, name.Name), name.Name)
						}
					}
				}
			}
		}
	}
}

// TestGoroutinesCheckedForLeaks: a package whose code starts goroutines
// (a go statement, or WaitGroup.Go) checks in its tests that none
// outlives them: goleak in its TestMain, or dockertest.Main or
// k8stest.Main, which run goleak after the Docker or cluster tests.
func TestGoroutinesCheckedForLeaks(t *testing.T) {
	for dir, pk := range loadModule(t) {
		if !slices.ContainsFunc(pk.files, startsGoroutines) {
			continue
		}
		if !checksLeaks(t, dir) {
			t.Errorf("%s starts goroutines but no test of it runs goleak (goleak.VerifyTestMain in a TestMain, or dockertest.Main)", dir)
		}
	}
}

func TestGoroutineRuleBites(t *testing.T) {
	for src, want := range map[string]bool{
		"package p\nfunc f() { go g() }\nfunc g() {}":                                        true,
		"package p\nimport \"sync\"\nfunc f(wg *sync.WaitGroup) { wg.Go(f2) }\nfunc f2() {}": true,
		"package p\nfunc f() { g() }\nfunc g() {}":                                           false,
	} {
		f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if got := startsGoroutines(f); got != want {
			t.Errorf("startsGoroutines(%q) = %v; want %v", src, got, want)
		}
	}
}

// startsGoroutines reports whether f has a go statement or a call of a
// method named Go (sync.WaitGroup.Go, errgroup.Group.Go).
func startsGoroutines(f *ast.File) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			found = true
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" {
				found = true
			}
		}
		return !found
	})
	return found
}

// checksLeaks reports whether a test file of dir runs goleak.
func checksLeaks(t *testing.T, dir string) bool {
	t.Helper()
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tests {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "goleak.VerifyTestMain(") || strings.Contains(string(src), "dockertest.Main(") || strings.Contains(string(src), "k8stest.Main(") {
			return true
		}
	}
	return false
}

func TestMain(m *testing.M) {
	// The tests read the source tree relative to the module root, where
	// `go test` runs a root package's tests.
	if _, err := os.Stat("go.mod"); err != nil {
		panic("arch tests must run in the module root")
	}
	os.Exit(m.Run())
}
