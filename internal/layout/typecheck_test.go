package layout

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// typeInfo is types.Info with the FileSet its positions refer to.
type typeInfo struct {
	*types.Info
	fset *token.FileSet
}

func (i typeInfo) FileSet() *token.FileSet { return i.fset }

// typeCheck type-checks the non-test files of package path, importing its
// dependencies from the export data the go command builds.
func typeCheck(t *testing.T, path string) (*types.Package, []*ast.File, typeInfo) {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Dir}}", path).Output()
	require.NoError(t, err, "go list -export")
	exports := map[string]string{}
	var dir string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "\t")
		require.Len(t, fields, 3, "go list line %q", line)
		exports[fields[0]] = fields[1]
		if fields[0] == path {
			dir = fields[2]
		}
	}
	require.NotEmpty(t, dir, "go list found %s", path)
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, err := (&types.Config{Importer: imp}).Check(path, fset, files, info)
	require.NoError(t, err, "type-check %s", path)
	return pkg, files, typeInfo{Info: info, fset: fset}
}
