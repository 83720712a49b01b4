package lambdaonce_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/internal/testenv"
)

// emulator is the Lambda Runtime Interface Emulator, built by go install so
// that it stays out of this module's requirements.
const emulator = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

const (
	runtimeQueueEnv  = "JOBONCE_LAMBDA_RUNTIME_QUEUE"
	runtimeARNEnv    = "JOBONCE_LAMBDA_RUNTIME_ARN"
	runtimePrefixEnv = "JOBONCE_LAMBDA_RUNTIME_PREFIX"
)

// The handler runs under lambda.Start behind the real Lambda Runtime API
// (the Runtime Interface Emulator), invoked with an event of records
// received from fauxqs: the response's JSON lists the failed record, each
// job runs once, and its copy in the batch is a duplicate.
func TestUnderTheLambdaRuntimeAPI(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	eff := newEffects(rdb, prefix)
	sendAll(t, c, q, []string{"r1", "r2", "r1", "bad"}, nil)
	ev := receiveN(t, c, q, 4)

	bin := t.TempDir()
	install := exec.Command("go", "install", emulator)
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
	out, err := install.CombinedOutput()
	require.NoError(t, err, "go install %s: %s", emulator, out)

	addr, api := freeAddr(t), freeAddr(t)
	rie := exec.Command(filepath.Join(bin, "aws-lambda-rie"),
		"--runtime-interface-emulator-address", addr, "--runtime-api-address", api,
		os.Args[0], "-test.run=^TestRuntimeWorker$", "-test.count=1")
	rie.Env = append(os.Environ(), "JOBONCE_TEST_WORKER=TestRuntimeWorker", "AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		runtimeQueueEnv+"="+q.url, runtimeARNEnv+"="+q.arn, runtimePrefixEnv+"="+prefix)
	var logs bytes.Buffer
	rie.Stdout, rie.Stderr = &logs, &logs
	require.NoError(t, rie.Start())
	t.Cleanup(func() {
		_ = rie.Process.Kill()
		_ = rie.Wait()
		if t.Failed() {
			t.Logf("emulator output:\n%s", logs.String())
		}
	})

	body, err := json.Marshal(ev)
	require.NoError(t, err)
	var resp events.SQSEventResponse
	invoke(t, "http://"+addr+"/2015-03-31/functions/function/invocations", body, &resp)
	require.Equal(t, idsOf(ev, "bad"), failed(resp))
	eff.requireOnce(t, []string{"r1", "r2"})
}

// invoke posts an event to the emulator, retrying while it does not accept
// connections yet, and decodes the response.
func invoke(t testing.TB, url string, body []byte, resp any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Post(url, "application/json", bytes.NewReader(body))
		var op *net.OpError
		if err != nil && errors.As(err, &op) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the emulator is starting
			continue
		}
		require.NoError(t, err)
		data, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.StatusCode, "%s", data)
		require.NoError(t, json.Unmarshal(data, resp), "%s", data)
		return
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestRuntimeWorker is the function that TestUnderTheLambdaRuntimeAPI runs
// under the emulator; it does nothing unless started by it.
func TestRuntimeWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	c := newSQS(t)
	prefix := os.Getenv(runtimePrefixEnv)
	rdb := testenv.Redis(t, "")
	eff := newEffects(rdb, prefix)
	q := testQueue{url: os.Getenv(runtimeQueueEnv), arn: os.Getenv(runtimeARNEnv)}
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	h := mustWrap(t, g, func(ctx context.Context, m events.SQSMessage) error {
		if m.Body == "bad" {
			return errors.New("bad fails")
		}
		return eff.record(ctx, m.Body)
	}, &lambdaonce.Config{Client: c, QueueURL: q.urlOf})
	lambda.Start(h)
}
