package gcos_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The layering of GCOS (STYLE.md): the root package holds the domain and its pure decisions (stdlib only); the
// store core (postgres) is the seam the stages share; a stage (intake, scan, gate, events) imports the core and
// the root package, never another stage (what one needs of another is a function the daemon hands it); one daemon
// assembles the stages; the edge (httpapi, cmd) talks to the core and the stages and never to the driver. These tests read each package's imports (its non-test files) and fail on any other edge.

const module = "gcos"

// stages never import one another.
var stages = []string{"gcos/intake", "gcos/scan", "gcos/gate", "gcos/events", "gcos/preview"}

// pgxImporters are the only packages that may import the PostgreSQL driver: the core, the stages, the reference
// evaluator, the synthetic world, the embedded cluster, the tests' fixtures, and the benchmark (whose naive
// baselines are plain SQL).
var pgxImporters = []string{
	"gcos/postgres", "gcos/postgres/migration", "gcos/postgres/substrate", "gcos/postgres/pgtest",
	"gcos/evaluate", "gcos/intake", "gcos/scan", "gcos/gate", "gcos/events", "gcos/preview", "gcos/oracle", "gcos/world", "gcos/embeddedpg", "gcos/gcostest", "gcos/bench",
}

// forbidden lists, per package, the module packages it must not import.
var forbidden = map[string][]string{
	// The core knows no stage and nothing that assembles or serves them.
	"gcos/postgres": {"gcos/evaluate", "gcos/intake", "gcos/scan", "gcos/gate", "gcos/events", "gcos/daemon", "gcos/httpapi", "gcos/oracle", "gcos/world", "gcos/bench"},
	// The evaluator and the object rows it derives serve the stages that write verdicts (intake's backfill, scan)
	// and know none of them; the reference evaluator never shares them.
	"gcos/evaluate": {"gcos/intake", "gcos/scan", "gcos/gate", "gcos/daemon", "gcos/httpapi", "gcos/oracle"},
	// The reference evaluator reads the substrate on its own; it must not share the code it checks.
	"gcos/oracle": {"gcos/evaluate", "gcos/intake", "gcos/scan", "gcos/daemon", "gcos/httpapi"},
	// A pipeline's client speaks the API's wire types (the root package) and nothing of the server.
	"gcos/client": {"gcos/postgres", "gcos/intake", "gcos/scan", "gcos/daemon", "gcos/httpapi", "gcos/oracle", "gcos/world", "gcos/events", "gcos/embeddedpg"},
	// The API serves what the daemon assembles; it does not assemble it.
	"gcos/httpapi": {"gcos/daemon", "gcos/scan", "gcos/oracle"},
}

// imports maps every package of the module to the packages its non-test files import.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		ip := module
		if path != "." {
			ip = module + "/" + filepath.ToSlash(path)
		}
		out[ip] = pkg.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{module, "gcos/postgres", "gcos/daemon"}, stages...) {
		if _, ok := out[want]; !ok {
			t.Fatalf("package %s not found: the layering test reads the wrong tree", want)
		}
	}
	return out
}

func TestLayering(t *testing.T) {
	graph := imports(t)
	for pkg, imps := range graph {
		for _, imp := range imps {
			switch {
			case pkg == module && !stdlib(imp):
				t.Errorf("the root package imports %s: it holds pure decisions, stdlib only", imp)
			case strings.HasPrefix(imp, "github.com/jackc/pgx") && !slices.Contains(pgxImporters, pkg):
				t.Errorf("%s imports the driver (%s): only %v may", pkg, imp, pgxImporters)
			case slices.Contains(stages, pkg) && slices.Contains(stages, imp):
				t.Errorf("stage %s imports stage %s: stages share only the store core", pkg, imp)
			case slices.Contains(stages, pkg) && (imp == "gcos/daemon" || imp == "gcos/httpapi"):
				t.Errorf("stage %s imports %s, which assembles or serves the stages", pkg, imp)
			case slices.Contains(forbidden[pkg], imp):
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	// Only the daemon's users import it: the command, the tests (and their fixtures) and the benchmark.
	for pkg, imps := range graph {
		if slices.Contains(imps, "gcos/daemon") && !slices.Contains([]string{"gcos/cmd/gcos", "gcos/gcostest", "gcos/bench"}, pkg) {
			t.Errorf("%s imports the daemon; only cmd/gcos, the tests and the benchmark start it", pkg)
		}
		if slices.Contains(imps, "gcos/gcostest") {
			t.Errorf("%s imports the test fixtures outside a test", pkg)
		}
	}
}

// TestWorkersAreAssembledOnce holds the daemon as the one place that wires the stages' workers: outside the
// daemon and each stage's own package, no file builds an intake worker or a scan scheduler by hand.
func TestWorkersAreAssembledOnce(t *testing.T) {
	wiring := []string{"intake.Worker{", "scan.Scheduler{", "intake.Monitor{"}
	own := []string{"daemon", "intake", "scan"}
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || path == "layering_test.go" {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, w := range wiring {
			if !strings.Contains(string(b), w) {
				continue
			}
			found++
			if !slices.Contains(own, dir) {
				t.Errorf("%s builds a %s by hand: start the daemon (daemon.New) instead", path, strings.TrimSuffix(w, "{"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no worker is built anywhere: the test reads the wrong tree")
	}
}

// stdlib reports whether an import path names a standard library package (no dot in its first element).
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") && first != module
}

// maxCoreMethods bounds the store core's exported surface (STYLE.md: a store core a newcomer can hold).
const maxCoreMethods = 60

// coreForOneStage are the store's exported methods that one stage alone calls and that still belong to the core,
// each for the reason given; any other such method belongs in its stage.
var coreForOneStage = map[string]string{
	"CountGroups":      "the kept counts are the candidate-state surface the stages share (STYLE.md); the scans read them whole",
	"KeepCounts":       "the kept counts (see CountGroups); the births handoff keeps them in the tail's transaction",
	"KeepSeedCounts":   "the kept counts (see CountGroups); the backfill seeds them",
	"RecountKept":      "the kept counts (see CountGroups); a change's handoff counts its collection again under their lock",
	"ListenDirty":      "the session connection is the core's (database.session_url); the scans listen on it",
	"ScanTransactions": "the core's record of open scan transactions (InScanTx, the scans') that the tail reads",
	"InScanTx":         "it records the scan transaction where the tail reads it (ScanTransactions), so the tail need not wait",
	"SettleHeld":       "it raises findings under the raisers' lock, which only the core's capture side takes",
	"GatePools":        "the pools the core opens; only the gate stage may take them (poolTakers)",
}

// poolTakers are the only packages that may take a raw pool from the store core (Store.Pool, Store.GatePools).
var poolTakers = map[string][]string{
	"Pool": {"gcos/postgres/migration", "gcos/postgres/substrate", "gcos/postgres/pgtest", "gcos/evaluate",
		"gcos/intake", "gcos/scan", "gcos/gate", "gcos/events", "gcos/preview", "gcos/oracle", "gcos/world", "gcos/gcostest",
		"gcos/bench", "gcos/cmd/gcos", "gcos/httpapi"},
	"GatePools": {"gcos/gate"},
}

// selectors maps every package of the module to the names it selects (x.Name) in its non-test files.
func selectors(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := module
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." {
			pkg = module + "/" + dir
		}
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				out[pkg][sel.Sel.Name] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// coreMethods are the exported methods of *postgres.Store, from the core's non-test files.
func coreMethods(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("postgres/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Store" {
					out = append(out, fd.Name.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestStoreCoreSurface holds the store core small and explicit: at most maxCoreMethods exported methods, none that
// only one stage calls (unless coreForOneStage says why it is the core's), and raw pools only for poolTakers. A
// name another type also has counts as a call (the check errs on the side of sharing).
func TestStoreCoreSurface(t *testing.T) {
	methods := coreMethods(t)
	if len(methods) > maxCoreMethods {
		t.Errorf("*postgres.Store has %d exported methods, more than %d: move what one stage needs into it", len(methods), maxCoreMethods)
	}
	if len(methods) < 20 {
		t.Fatalf("only %d exported methods found: the test reads the wrong tree", len(methods))
	}
	sel := selectors(t)
	core := func(pkg string) bool { return pkg == "gcos/postgres" || strings.HasPrefix(pkg, "gcos/postgres/") }
	for _, m := range methods {
		var callers []string
		for pkg, names := range sel {
			if names[m] {
				callers = append(callers, pkg)
			}
		}
		slices.Sort(callers)
		if takers, ok := poolTakers[m]; ok {
			for _, c := range callers {
				if !core(c) && !slices.Contains(takers, c) {
					t.Errorf("%s takes a raw pool (Store.%s); only %v may", c, m, takers)
				}
			}
		}
		if slices.Contains(callers, "gcos/postgres") {
			continue // the core uses it itself
		}
		if len(callers) == 1 && slices.Contains(stages, callers[0]) && coreForOneStage[m] == "" {
			t.Errorf("Store.%s is called by %s alone: it belongs in that stage", m, callers[0])
		}
	}
	for m := range coreForOneStage {
		if !slices.Contains(methods, m) {
			t.Errorf("coreForOneStage names %s, which is no exported method of the store", m)
		}
	}
}
