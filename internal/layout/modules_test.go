package layout

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// framework is a dependency that only the users of one adapter or store
// should find in their module graph: every module path starting with one
// of prefixes, allowed in the graph of the packages named in allowed. One
// that is ours only when jobonce requires it (a test-only module, which a
// framework may need for itself) is checked among the requirements of
// jobonce's modules alone.
type framework struct {
	name     string
	prefixes []string
	allowed  []string
	ours     bool
}

// frameworks are the hosts, clients and test-only modules that must stay
// out of the module graph of a user who does not import them. A module
// belongs to the first that names a prefix of its path: the Lambda runtime
// and each AWS service come before the AWS SDK, whose prefix they share,
// and Watermill's backends before Watermill.
var frameworks = []framework{
	{"River", []string{"github.com/riverqueue/"}, []string{"adapters/river"}, false},
	{"pgx", []string{"github.com/jackc/"}, []string{"core/pgstore", "adapters/river"}, false},
	{"the Lambda runtime", []string{"github.com/aws/aws-lambda-go"}, []string{"adapters/lambda"}, false},
	{"the SQS client", []string{"github.com/aws/aws-sdk-go-v2/service/sqs"}, []string{"adapters/sqs", "adapters/lambda"}, false},
	{"the DynamoDB client", []string{"github.com/aws/aws-sdk-go-v2/service/dynamodb"}, []string{"core/dynamostore"}, false},
	{"the AWS SDK", []string{"github.com/aws/"}, []string{"adapters/sqs", "adapters/lambda", "core/dynamostore"}, false},
	{"Asynq", []string{"github.com/hibiken/asynq"}, []string{"adapters/asynq"}, false},
	{"a Watermill backend", []string{"github.com/ThreeDotsLabs/watermill-"}, nil, false},
	{"Watermill", []string{"github.com/ThreeDotsLabs/"}, []string{"adapters/watermill"}, false},
	{"a NATS client", []string{"github.com/nats-io/"}, nil, false},
	{"an AMQP client", []string{"github.com/rabbitmq/", "github.com/streadway/amqp"}, nil, false},
	{"a test-only module", []string{"github.com/alicebob/miniredis", "github.com/prometheus/",
		"github.com/bsm/redislock", "github.com/go-redsync/"}, nil, true},
}

// userPackages are the packages a service imports, one at a time: core
// and each store and adapter, relative to the library's module path.
var userPackages = []string{
	"core",
	"core/memstore",
	"core/redisstore",
	"core/pgstore",
	"core/dynamostore",
	"adapters/asynq",
	"adapters/river",
	"adapters/sqs",
	"adapters/watermill",
	"adapters/lambda",
}

// workModules returns the directories go.work uses, relative to the
// repository's root, and the root's absolute path.
func workModules(t *testing.T) (root string, dirs []string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go work edit -json: is go.work at the repository's root?")
	var work struct{ Use []struct{ DiskPath string } }
	require.NoError(t, json.Unmarshal(out, &work))
	for _, u := range work.Use {
		dirs = append(dirs, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	return root, dirs
}

// TestGoWorkListsEveryModule: every go.mod of the tree is a module of the
// workspace, so that scripts/test.sh (`go test work`) tests it and `go vet
// work` vets it.
func TestGoWorkListsEveryModule(t *testing.T) {
	root, used := workModules(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			found = append(found, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(found)
	slices.Sort(used)
	require.Equal(t, found, used, "the go.mod files of the tree against go.work's use list: run `go work use <dir>`")
}

// TestEachPackageBringsOnlyItsFramework pins the module boundaries: a
// service importing one of userPackages alone, after `go mod tidy`, has in
// its module graph no framework, client or test-only module that package
// does not need. Each case is a module of its own in a temporary
// directory, replacing jobonce's modules with the local ones, tidied
// through the environment's module proxy (tidy also loads the tests of the
// packages it pulls in, whose modules no build of the workspace fetches).
func TestEachPackageBringsOnlyItsFramework(t *testing.T) {
	root, dirs := workModules(t)
	var replaces []string
	for _, dir := range dirs {
		replaces = append(replaces, "replace "+modulePath(t, filepath.Join(root, dir))+" => "+filepath.Join(root, dir))
	}
	for _, pkg := range userPackages {
		t.Run(strings.ReplaceAll(pkg, "/", "_"), func(t *testing.T) {
			t.Parallel()
			graph := userGraph(t, module+"/"+pkg, replaces)
			for _, m := range graph.modules() {
				f, ok := frameworkOf(m)
				if ok && !slices.Contains(f.allowed, pkg) && (!f.ours || graph.requiredByJobonce(m)) {
					t.Errorf("a service importing %s alone has %s in its module graph: %s, through %s",
						pkg, f.name, m, strings.Join(graph.path(m), " -> "))
				}
			}
		})
	}
}

// modulePath returns the module path declared by dir's go.mod.
func modulePath(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("%s/go.mod has no module line", dir)
	return ""
}

// frameworkOf returns the first of frameworks that the module@version m
// belongs to.
func frameworkOf(m string) (framework, bool) {
	path, _, _ := strings.Cut(m, "@")
	for _, f := range frameworks {
		for _, p := range f.prefixes {
			if strings.HasPrefix(path, p) {
				return f, true
			}
		}
	}
	return framework{}, false
}

// moduleGraph is the output of `go mod graph`: each module@version's
// requirements, the main module's under its bare path.
type moduleGraph struct {
	main  string
	edges map[string][]string
}

// userGraph builds a module that imports pkg alone, tidies it and returns
// its module graph.
func userGraph(t *testing.T, pkg string, replaces []string) moduleGraph {
	t.Helper()
	dir := t.TempDir()
	const user = "example.com/user"
	gomod := "module " + user + "\n\ngo 1.26.0\n\n" + strings.Join(replaces, "\n") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	src := "package user\n\nimport _ \"" + pkg + "\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "user.go"), []byte(src), 0o644))
	env := append(os.Environ(),
		"GOWORK=off",       // the user's module alone, not the workspace
		"GOFLAGS=-mod=mod", // tidy may write go.mod and go.sum
		"GOSUMDB=off",      // the graph is read, never built: no checksum database is needed
		"GOTOOLCHAIN=local",
	)
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go %s, in a module importing %s alone: %v\n%s", strings.Join(args, " "), pkg, err, stderr)
		}
		return string(out)
	}
	run("mod", "tidy")
	g := moduleGraph{main: user, edges: make(map[string][]string)}
	for line := range strings.Lines(run("mod", "graph")) {
		from, to, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			g.edges[from] = append(g.edges[from], to)
		}
	}
	require.NotEmpty(t, g.edges[user], "the module graph of a module importing %s", pkg)
	return g
}

// modules returns every module@version in g but the main module.
func (g moduleGraph) modules() []string {
	seen := make(map[string]bool)
	var all []string
	for _, tos := range g.edges {
		for _, to := range tos {
			if !seen[to] {
				seen[to] = true
				all = append(all, to)
			}
		}
	}
	slices.Sort(all)
	return all
}

// requiredByJobonce reports whether the main module or one of jobonce's
// modules requires m itself.
func (g moduleGraph) requiredByJobonce(m string) bool {
	for from, tos := range g.edges {
		if (from == g.main || from == module || strings.HasPrefix(from, module+"@") || strings.HasPrefix(from, module+"/")) &&
			slices.Contains(tos, m) {
			return true
		}
	}
	return false
}

// path returns the requirements that lead from the main module to target,
// the shortest of them.
func (g moduleGraph) path(target string) []string {
	prev := map[string]string{g.main: ""}
	queue := []string{g.main}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if m == target {
			var p []string
			for ; m != ""; m = prev[m] {
				p = append(p, m)
			}
			slices.Reverse(p)
			return p
		}
		for _, to := range g.edges[m] {
			if _, ok := prev[to]; !ok {
				prev[to] = m
				queue = append(queue, to)
			}
		}
	}
	return []string{g.main, "?", target}
}
