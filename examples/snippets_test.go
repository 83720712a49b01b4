package examples_test

// TestSnippetsCompile compiles every ```go block of README.md and docs/*.md,
// so that no snippet a reader copies is out of date. A block is one of:
//
//   - a file: a block whose first line starts with "package" builds as it is,
//     in a package of its own (a "package main" block is a program);
//   - a fragment: a block whose first line is "// fragment". Its leading
//     lines that parse as Go declarations (types, funcs, vars) go in a file
//     as they are; the statements after them are type-checked as the body
//     of a func returning error (so "return err" works). A fragment names the
//     packages it uses by their usual names (core, redisstore, asynqonce,
//     river, sqs, …; see imports below), and may use the values a reader has
//     from the prose around it: ctx, guard, txGuard, pool and awsCfg (see
//     prelude below), which it can shadow.
//
// Every other block fails the test. Errors are reported at the Markdown
// file's line (each generated file carries a //line directive).
//
//	go -C examples test -run Snippets ./...

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	// Packages the snippets import and no example does, so that go mod tidy
	// keeps their modules in go.mod and go.sum.
	_ "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/jobonce/jobonce/core/dynamostore"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/riverqueue/river/rivertype"
	_ "go.opentelemetry.io/otel/exporters/prometheus"
	_ "go.opentelemetry.io/otel/sdk/metric"
)

// imports maps the names fragments use to their import paths.
var imports = map[string]string{
	"aws":           "github.com/aws/aws-sdk-go-v2/aws",
	"asynq":         "github.com/hibiken/asynq",
	"asynqonce":     "github.com/jobonce/jobonce/adapters/asynq",
	"context":       "context",
	"core":          "github.com/jobonce/jobonce/core",
	"driver":        "github.com/jobonce/jobonce/core/driver",
	"errors":        "errors",
	"fmt":           "fmt",
	"http":          "net/http",
	"log":           "log",
	"memstore":      "github.com/jobonce/jobonce/core/memstore",
	"os":            "os",
	"pgstore":       "github.com/jobonce/jobonce/core/pgstore",
	"pgx":           "github.com/jackc/pgx/v5",
	"pgxpool":       "github.com/jackc/pgx/v5/pgxpool",
	"redis":         "github.com/redis/go-redis/v9",
	"redisstore":    "github.com/jobonce/jobonce/core/redisstore",
	"river":         "github.com/riverqueue/river",
	"riveronce":     "github.com/jobonce/jobonce/adapters/river",
	"riverpgxv5":    "github.com/riverqueue/river/riverdriver/riverpgxv5",
	"rivertype":     "github.com/riverqueue/river/rivertype",
	"slog":          "log/slog",
	"sqs":           "github.com/aws/aws-sdk-go-v2/service/sqs",
	"sqsonce":       "github.com/jobonce/jobonce/adapters/sqs",
	"strconv":       "strconv",
	"strings":       "strings",
	"time":          "time",
	"types":         "github.com/aws/aws-sdk-go-v2/service/sqs/types",
	"bytes":         "bytes",
	"storetest":     "github.com/jobonce/jobonce/core/storetest",
	"testing":       "testing",
	"io":            "io",
	"json":          "encoding/json",
	"sync":          "sync",
	"atomic":        "sync/atomic",
	"signal":        "os/signal",
	"syscall":       "syscall",
	"httptest":      "net/http/httptest",
	"cmp":           "cmp",
	"rand":          "crypto/rand",
	"hex":           "encoding/hex",
	"rivermigrate":  "github.com/riverqueue/river/rivermigrate",
	"watermill":     "github.com/ThreeDotsLabs/watermill",
	"message":       "github.com/ThreeDotsLabs/watermill/message",
	"middleware":    "github.com/ThreeDotsLabs/watermill/message/router/middleware",
	"gochannel":     "github.com/ThreeDotsLabs/watermill/pubsub/gochannel",
	"watermillonce": "github.com/jobonce/jobonce/adapters/watermill",
	"sdkmetric":     "go.opentelemetry.io/otel/sdk/metric",
	"otel":          "go.opentelemetry.io/otel",
	"otelprom":      "go.opentelemetry.io/otel/exporters/prometheus",
	"promhttp":      "github.com/prometheus/client_golang/prometheus/promhttp",
	"lambdaonce":    "github.com/jobonce/jobonce/adapters/lambda",
	"events":        "github.com/aws/aws-lambda-go/events",
	"lambda":        "github.com/aws/aws-lambda-go/lambda",
}

// prelude declares the values fragments may use without making them.
const prelude = `package snippet

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core"
)

var (
	ctx     context.Context
	guard   *core.Guard            // a Guard on Redis, as the README makes it
	txGuard *core.TxGuard[pgx.Tx]  // a Guard on a pgstore, in its transactional mode
	pool    *pgxpool.Pool          // the application's PostgreSQL pool
	awsCfg  aws.Config             // from config.LoadDefaultConfig
)

var (
	_ = ctx
	_ = guard
	_ = txGuard
	_ = pool
	_ = awsCfg
)
`

// snippet is one ```go block.
type snippet struct {
	file string // the Markdown file, relative to the repository root
	line int    // of the block's first line of code
	code string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

func TestSnippetsCompile(t *testing.T) {
	docs, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	var snippets []snippet
	for _, path := range append([]string{"../README.md"}, docs...) {
		snippets = append(snippets, goBlocks(t, path)...)
	}
	require.NotEmpty(t, snippets)

	dir, err := os.MkdirTemp(".", "_snippets")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var pkgs []string
	for i, s := range snippets {
		files, err := sources(s)
		require.NoError(t, err, "%s", s)
		pkg := filepath.Join(dir, fmt.Sprintf("s%03d", i))
		require.NoError(t, os.Mkdir(pkg, 0o755))
		for name, src := range files {
			require.NoError(t, os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o644))
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
	}
	cmd := exec.Command("go", append([]string{"build"}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%d snippets checked; the compiler says:\n%s", len(snippets), out)
	t.Logf("%d snippets compile", len(snippets))
}

// goBlocks returns the ```go blocks of the Markdown file at path.
func goBlocks(t *testing.T, path string) []snippet {
	t.Helper()
	text, err := os.ReadFile(path)
	require.NoError(t, err)
	name := strings.TrimPrefix(filepath.ToSlash(path), "../")
	var out []snippet
	var cur *snippet
	for i, line := range strings.Split(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &snippet{file: name, line: i + 2}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	require.Nil(t, cur, "%s: a ```go block is never closed", name)
	return out
}

// sources returns the files of the package that compiles s, by name.
func sources(s snippet) (map[string]string, error) {
	first, body, _ := strings.Cut(s.code, "\n")
	lineDirective := func(line int) string { return fmt.Sprintf("//line %s:%d\n", s.file, line) }
	switch {
	case strings.HasPrefix(first, "package "):
		return map[string]string{"snippet.go": lineDirective(s.line) + s.code}, nil
	case strings.TrimSpace(first) != "// fragment":
		return nil, fmt.Errorf(`a go block must start with "package …" or "// fragment", not %q`, first)
	}
	names, err := packagesUsed(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	var src bytes.Buffer
	src.WriteString("package snippet\n\n")
	for _, name := range names {
		fmt.Fprintf(&src, "import %s %q\n", name, imports[name])
	}
	decls, stmts, n := split(body)
	src.WriteString(lineDirective(s.line + 1))
	src.WriteString(decls)
	if stmts != "" {
		src.WriteString("\nfunc _() error {\n")
		src.WriteString(lineDirective(s.line + 1 + n))
		src.WriteString(stmts)
		src.WriteString("\treturn nil\n}\n")
	}
	return map[string]string{"prelude.go": prelude, "snippet.go": src.String()}, nil
}

// split cuts body into its leading declarations and the statements after
// them, at the last line where both parse (the statements may be none); n is
// the declarations' number of lines. Where nothing parses, all of body is
// statements, for the compiler to report.
func split(body string) (decls, stmts string, n int) {
	lines := strings.SplitAfter(body, "\n")
	for n = len(lines); n > 0; n-- {
		decls, stmts = strings.Join(lines[:n], ""), strings.Join(lines[n:], "")
		if parses("package p\n"+decls) && parses("package p\nfunc _() {\n"+stmts+"\n}\n") {
			return decls, stmts, n
		}
	}
	return "", body, 0
}

func parses(src string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	return err == nil
}

// packagesUsed returns the names in imports that body qualifies an
// identifier with (name.X), comments aside.
func packagesUsed(body string) ([]string, error) {
	fset := token.NewFileSet()
	var s scanner.Scanner
	var errs []string
	s.Init(fset.AddFile("", -1, len(body)), []byte(body), func(_ token.Position, msg string) { errs = append(errs, msg) }, 0)
	used := map[string]bool{}
	prev, prevLit := token.ILLEGAL, ""
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && prev == token.IDENT {
			if _, ok := imports[prevLit]; ok {
				used[prevLit] = true
			}
		}
		prev, prevLit = tok, lit
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// TestREADMEStaysShortAndItsLinksResolve keeps the README a page a newcomer
// reads in a minute, with the rest in docs/, and every relative link of the
// README and docs/ pointing at a file that exists.
func TestREADMEStaysShortAndItsLinksResolve(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	require.LessOrEqual(t, strings.Count(string(readme), "\n"), 250, "README.md: move detail to docs/")

	docs, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	link := regexp.MustCompile(`(?:^|[^\w\]])\[[^\]]+\]\(([^)#\s]+)(#[^)]*)?\)`) // not a Go index expression
	for _, path := range append([]string{"../README.md"}, docs...) {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(path), target))
			require.NoError(t, err, "%s links to %s", path, target)
		}
	}
}
