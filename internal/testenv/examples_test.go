package testenv

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// childEnv marks a copy of this test binary started by runSelf.
const childEnv = "JOBONCE_TESTENV_CHILD"

func TestMain(m *testing.M) {
	os.Exit(RunExamples(m, NeedRedis))
}

// A package whose Example functions need Redis runs them through RunExamples
// in its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunExamples(m, testenv.NeedRedis)) }
//
// Without an answering Redis they are skipped; with one, this prints PONG.
func ExampleRunExamples() {
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	client := redis.NewClient(opt)
	defer func() { _ = client.Close() }()
	fmt.Println(client.Ping(context.Background()).Val())
	// Output: PONG
}

func TestRunExamplesSkipsExamplesButRunsTestsWhenRedisIsMissing(t *testing.T) {
	skipInChild(t)
	out := runSelf(t, "redis://"+ClosedAddr(t)+"/0", "-test.skip=^TestUnavailable")
	require.Contains(t, out, "testenv: skipping the Example functions: Redis at redis://")
	require.Contains(t, out, "=== RUN   TestSkipAllExamples", "the tests run")
	require.NotContains(t, out, "=== RUN   TestUnavailable", "the caller's -test.skip is kept")
	require.NotContains(t, out, "=== RUN   ExampleRunExamples")
}

func TestRunExamplesSkipsExamplesNamedByRun(t *testing.T) {
	skipInChild(t)
	out := runSelf(t, "redis://"+ClosedAddr(t)+"/0", "-test.run=^ExampleRunExamples$")
	require.Contains(t, out, "testenv: skipping the Example functions: Redis at redis://")
	require.NotContains(t, out, "=== RUN   ExampleRunExamples")
}

func TestRunExamplesRunsExamplesWhenRedisAnswers(t *testing.T) {
	skipInChild(t)
	Redis(t, "")
	out := runSelf(t, RedisURL(), "-test.run=^ExampleRunExamples$")
	require.Contains(t, out, "--- PASS: ExampleRunExamples")
	require.NotContains(t, out, "skipping")
}

func TestUnavailableReportsClosedPorts(t *testing.T) {
	addr := ClosedAddr(t)
	t.Setenv("TEST_REDIS_URL", "redis://"+addr+"/0")
	t.Setenv("TEST_SQS_ENDPOINT", "http://"+addr)
	start := time.Now()
	err := unavailable(NeedRedis, NeedSQS)
	require.Less(t, time.Since(start), probeTimeout)
	require.ErrorContains(t, err, "Redis at redis://"+addr)
	require.ErrorContains(t, err, "SQS at http://"+addr)
}

func TestUnavailableBoundsServersThatNeverAnswer(t *testing.T) {
	addr := SilentAddr(t)
	silent := func(name string) Server {
		return NewServer(name, func(ctx context.Context) error {
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			<-ctx.Done() // the server never answers
			return fmt.Errorf("%s at %s does not answer: %w", name, addr, ctx.Err())
		})
	}
	t.Setenv("TEST_REDIS_URL", "redis://"+addr+"/0")
	start := time.Now()
	err := unavailable(NeedRedis, silent("Other"))
	// Probed one after the other, the two would take at least 2×probeTimeout.
	require.Less(t, time.Since(start), 2*probeTimeout)
	require.ErrorContains(t, err, "Redis at redis://"+addr)
	require.ErrorContains(t, err, "Other at "+addr)
}

func TestUnavailableSQS(t *testing.T) {
	t.Setenv("TEST_SQS_ENDPOINT", "")
	require.ErrorContains(t, unavailable(NeedSQS), "TEST_SQS_ENDPOINT is not set")
	t.Setenv("TEST_SQS_ENDPOINT", "127.0.0.1:4566")
	require.ErrorContains(t, unavailable(NeedSQS), "is not a URL with a host")
	t.Setenv("TEST_SQS_ENDPOINT", "http://"+SilentAddr(t))
	require.NoError(t, unavailable(NeedSQS), "a server accepting connections is there")
}

func TestUnavailableFindsTheTestServers(t *testing.T) {
	Short(t)
	require.NoError(t, unavailable(NeedRedis))
}

func TestUnavailableRejectsAnUnknownServer(t *testing.T) {
	require.ErrorContains(t, unavailable(Server{}), "Server{}: unknown server")
}

func TestSkipAllExamples(t *testing.T) {
	for old, want := range map[string]string{
		"":          "^Example",
		"TestA/sub": "TestA/sub|^Example",
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.String("test.skip", old, "")
		require.NoError(t, skipAllExamples(fs))
		require.Equal(t, want, fs.Lookup("test.skip").Value.String())
	}
	require.Error(t, skipAllExamples(flag.NewFlagSet("test", flag.ContinueOnError)))
}

// skipInChild skips a test that calls runSelf inside the copy runSelf starts.
func skipInChild(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("inside a copy started by runSelf")
	}
}

// runSelf runs this test binary verbosely with args and TEST_REDIS_URL set to
// redisURL, requires it to pass, and returns its output.
func runSelf(t *testing.T, redisURL string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.v"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1", "TEST_REDIS_URL="+redisURL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}
