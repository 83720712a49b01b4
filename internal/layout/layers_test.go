package layout

import (
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
