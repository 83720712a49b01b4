package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// history matches the words that tell how a defect was found rather than
// what a test pins (STYLE.md point 15).
var history = regexp.MustCompile(`(?i)attack|hardening|regression|proof`)

// pastTense matches the words by which a comment of the product tells its
// history ("as the previous release did") instead of its contract; the
// CHANGELOG tells history.
var pastTense = regexp.MustCompile(`(?i)previous release|as before|used to be|formerly`)

// historyComment matches the same in a test file's comments.
var historyComment = regexp.MustCompile(`(?i)attack|review found|hardening|regression`)

// TestNamesSayWhatTheyTest pins STYLE.md point 15 over the whole tree (the
// examples and bench modules too): no file name, no function in a test
// file, no subtest name given to t.Run as a literal and no test file's
// comment says how a defect was found (an attack, a review, a regression,
// a hardening, a proof), and no comment in the code tells its history.
func TestNamesSayWhatTheyTest(t *testing.T) {
	root := filepath.Join("..", "..")
	_, err := os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the module's root is two levels up")
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if history.MatchString(d.Name()) {
			t.Errorf("%s: the name tells how a defect was found: name the file for the code it tests", rel)
		}
		switch {
		case rel == filepath.Join("internal", "layout", "names_test.go"):
		case strings.HasSuffix(path, "_test.go"):
			files++
			checkTestFile(t, path, rel)
		case strings.HasSuffix(path, ".go"):
			checkComments(t, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk found the module's test files")
}

func checkTestFile(t *testing.T, path, rel string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	require.NoError(t, err)
	for _, cg := range f.Comments {
		if m := historyComment.FindString(cg.Text()); m != "" {
			t.Errorf("%s: a comment says %q: say what the test pins", fset.Position(cg.Pos()), m)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if history.MatchString(n.Name.Name) {
				t.Errorf("%s: %s: the name tells how a defect was found: name the test for the behaviour it pins", rel, n.Name.Name)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Run" || len(n.Args) == 0 {
				return true
			}
			if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if name, err := strconv.Unquote(lit.Value); err == nil && history.MatchString(name) {
					t.Errorf("%s: subtest %q: the name tells how a defect was found: name the test for the behaviour it pins", fset.Position(lit.Pos()), name)
				}
			}
		}
		return true
	})
}

func checkComments(t *testing.T, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	require.NoError(t, err)
	for _, cg := range f.Comments {
		if m := pastTense.FindString(cg.Text()); m != "" {
			t.Errorf("%s: a comment says %q: say what the code does; history goes to CHANGELOG.md", fset.Position(cg.Pos()), m)
		}
	}
}
