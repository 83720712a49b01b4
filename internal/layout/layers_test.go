package layout

import (
	"go/ast"
	"go/types"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/jobonce/jobonce"

// stores are the packages that implement driver.Store.
var stores = []string{
	module + "/core/redisstore",
	module + "/core/pgstore",
	module + "/core/memstore",
	module + "/core/dynamostore",
}

// TestStoresImportOnlyDriver pins STYLE.md point 13: a store stands on
// core/driver and the client it wraps, never on core or another core
// package; the internal packages it uses stand on no core package either
// (go list -deps follows them). The stores in modules of their own are
// listed through go.work.
func TestStoresImportOnlyDriver(t *testing.T) {
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, stores...)...).CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+"/core/driver")
	allowed := map[string]bool{module + "/core/driver": true}
	for _, s := range stores {
		allowed[s] = true
	}
	for _, dep := range deps {
		if dep != module && !strings.HasPrefix(dep, module+"/") {
			continue
		}
		if allowed[dep] || strings.HasPrefix(dep, module+"/internal/") {
			continue
		}
		t.Errorf("a store depends on %s: stores import core/driver alone of jobonce's core packages", dep)
	}
}

// aboveCore are the internal packages that stand on core: the adapters'
// rules for jobs and keys, and the test support (testenv, and pgtest
// beside it). Every other internal package lies beneath core.
var aboveCore = map[string]bool{
	module + "/internal/jobkey":  true,
	module + "/internal/testenv": true,
	module + "/internal/pgtest":  true,
}

// TestInternalPackagesStandBeneathCore pins STYLE.md points 13 and 17: the
// mechanisms core uses (the group commit, the heartbeat, the completion
// signal, the store calls, the stored keys, the job context) live in
// internal packages that import core/driver at most, never core, so they
// take what they need to call back as functions.
func TestInternalPackagesStandBeneathCore(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/internal/...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	pkgs := strings.Fields(string(out))
	for _, want := range []string{"groupcommit", "heartbeat", "signal", "storecall", "storedkey", "jobctx"} {
		require.Contains(t, pkgs, module+"/internal/"+want)
	}
	for _, pkg := range pkgs {
		if aboveCore[pkg] {
			continue
		}
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		require.NoError(t, err, "go list: %s", out)
		for _, dep := range strings.Fields(string(out)) {
			if (dep == module+"/core" || strings.HasPrefix(dep, module+"/core/")) && dep != module+"/core/driver" {
				t.Errorf("%s depends on %s: an internal package beneath core imports core/driver at most", pkg, dep)
			}
		}
	}
}

// TestClaimCallsNoGuardMethod pins STYLE.md point 17 inside core: calls go
// Guard → Claim → store, so no method of Claim (nor a function literal in
// one) calls a method of Guard; what a Claim shares with its Guard it
// reaches through the Guard's fields (its store, its observer, its
// configuration).
func TestClaimCallsNoGuardMethod(t *testing.T) {
	pkg, files, info := typeCheck(t, module+"/core")
	guard := pkg.Scope().Lookup("Guard")
	require.NotNil(t, guard, "core declares Guard")
	claimMethods := 0
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Body == nil || receiverName(fn) != "Claim" {
				continue
			}
			claimMethods++
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				s := info.Selections[sel]
				if s == nil || s.Kind() != types.MethodVal {
					return true
				}
				recv := s.Recv()
				if p, ok := recv.(*types.Pointer); ok {
					recv = p.Elem()
				}
				if named, ok := recv.(*types.Named); ok && named.Obj() == guard {
					t.Errorf("%s: Claim.%s calls Guard.%s: calls go Guard → Claim → store, never back up",
						info.FileSet().Position(call.Pos()), fn.Name.Name, sel.Sel.Name)
				}
				return true
			})
		}
	}
	require.Greater(t, claimMethods, 10, "the walk found Claim's methods")
}

// receiverName returns the name of fn's receiver type, without its star.
func receiverName(fn *ast.FuncDecl) string {
	expr := fn.Recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	if id, ok := expr.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
