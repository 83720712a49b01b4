package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/hibiken/asynq"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	riveronce "github.com/jobonce/jobonce/adapters/river"
	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

var keyLine = regexp.MustCompile(`(?m)^key: (".*")$`)

// printedKey returns the key out printed, unquoted.
func printedKey(t *testing.T, out string) string {
	t.Helper()
	m := keyLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no key in:\n%s", out)
	key, err := strconv.Unquote(m[1])
	require.NoError(t, err)
	return key
}

// keyCase is a job as an operator knows it, the command line that names
// it, and the key its adapter gives it.
type keyCase struct {
	name    string
	args    []string // after "key"
	payload string   // on stdin
	want    string
}

func keyCases(t *testing.T) []keyCase {
	t.Helper()
	const queue = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
	fifo := queue + ".fifo"
	sqsKey := func(url string, m types.Message) string {
		key, err := sqsonce.DefaultKey(url, m)
		require.NoError(t, err)
		return key
	}
	row := func(kind, args, metadata string, id int64) *rivertype.JobRow {
		return &rivertype.JobRow{ID: id, Kind: kind, EncodedArgs: []byte(args), Metadata: []byte(metadata)}
	}
	const at = "2026-12-07T10:00:00Z"
	return []keyCase{
		{"asynq", []string{"asynq", "email:welcome"}, `{"user": 42}`,
			asynqonce.DefaultKey(asynq.NewTask("email:welcome", []byte(`{"user": 42}`)))},
		{"asynq, no payload", []string{"asynq", "report"}, "", asynqonce.DefaultKey(asynq.NewTask("report", nil))},
		{"sqs standard", []string{"sqs", queue}, "ship order 7", sqsKey(queue, types.Message{Body: aws.String("ship order 7")})},
		{"sqs standard by name", []string{"sqs", "orders"}, "ship order 7", sqsKey(queue, types.Message{Body: aws.String("ship order 7")})},
		{"sqs fifo", []string{"sqs", fifo, "-message-id", "5d9f1c2e"}, "",
			sqsKey(fifo, types.Message{Body: aws.String("ship order 7"), MessageId: aws.String("5d9f1c2e")})},
		{"river", []string{"river", "email_welcome"}, `{"a": 1, "user_id": 42}`,
			riveronce.DefaultKey(row("email_welcome", `{"a": 1, "user_id": 42}`, `{}`, 9))},
		{"river, key recorded at insert", []string{"river", "email_welcome", "-metadata", `{"jobonce_key": "email:welcome:42"}`}, "",
			riveronce.DefaultKey(row("email_welcome", `{"user_id": 42}`, `{"jobonce_key": "email:welcome:42"}`, 9))},
		{"river periodic with an ID", []string{"river", "digest", "-metadata", `{"periodic": true, "river:periodic_job_id": "daily", "jobonce_occurrence": "` + at + `"}`}, "",
			riveronce.DefaultKey(row("digest", `{}`, `{"periodic": true, "river:periodic_job_id": "daily", "jobonce_occurrence": "`+at+`"}`, 9))},
		{"river periodic", []string{"river", "digest", "-metadata", `{"periodic": true, "jobonce_occurrence": "` + at + `"}`}, `{"n": 1}`,
			riveronce.DefaultKey(row("digest", `{"n": 1}`, `{"periodic": true, "jobonce_occurrence": "`+at+`"}`, 9))},
		{"river periodic, unrecorded", []string{"river", "digest", "-metadata", `{"periodic": true}`, "-job-id", "77"}, "",
			riveronce.DefaultKey(row("digest", `{}`, `{"periodic": true}`, 77))},
		{"watermill", []string{"watermill", "ship", "-topic", "orders"}, `{"order": 7}`,
			watermillonce.DefaultKey(message.NewMessage("uuid-1", message.Payload(`{"order": 7}`)), "ship", "orders")},
	}
}

// TestKeyPrintsTheAdaptersDefaultKeyAndItsStoredKey: for each adapter, the
// key the command prints is the adapter's DefaultKey of the job it names,
// and the stored key is where a Guard under -prefix (and -plain) keeps it.
func TestKeyPrintsTheAdaptersDefaultKeyAndItsStoredKey(t *testing.T) {
	for _, c := range keyCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, plain := range []bool{false, true} {
				args := append([]string{"key", "-prefix", "app:"}, c.args...)
				if plain {
					args = append(args, "-plain")
				}
				r := runCLI(t, strings.NewReader(c.payload), nil, args...)
				require.Zero(t, r.status, "%s", r)
				require.Empty(t, r.stderr)
				require.Equal(t, c.want, printedKey(t, r.stdout))
				require.Equal(t, storedForm(storedKeyOf(t, "app:", c.want, plain)), printedStoredKey(t, r.stdout), "plain %t", plain)
			}
		})
	}
}

func TestKeyReadsThePayloadFromAFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"user": 42}`), 0o600))
	r := runCLI(t, strings.NewReader("not this"), nil, "key", "asynq", "email:welcome", "-payload", path)
	require.Zero(t, r.status, "%s", r)
	require.Equal(t, asynqonce.DefaultKey(asynq.NewTask("email:welcome", []byte(`{"user": 42}`))), printedKey(t, r.stdout))

	r = runCLI(t, nil, nil, "key", "asynq", "email:welcome", "-payload", filepath.Join(t.TempDir(), "missing"))
	requireOneErrorLine(t, r, "jobonce: key: -payload: open ")
}

func TestKeyRefusesWhatWouldGiveAnotherKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"key", "beanstalk", "email"}, `key: unknown ADAPTER "beanstalk": give asynq, sqs, river or watermill`},
		{[]string{"key", "asynq", ""}, "key: NAME is empty"},
		{[]string{"key", "asynq", "email", "-topic", "orders"}, "key: -topic is for watermill jobs, not asynq"},
		{[]string{"key", "river", "digest", "-message-id", "1"}, "key: -message-id is for sqs jobs, not river"},
		{[]string{"key", "watermill", "ship"}, "give -topic"},
		{[]string{"key", "sqs", "orders.fifo"}, "key: orders.fifo is a FIFO queue, whose messages are keyed by their MessageId: give -message-id"},
		{[]string{"key", "sqs", "orders", "-message-id", "1"}, "-message-id is for FIFO queues"},
		{[]string{"key", "sqs", "https://sqs.us-east-1.amazonaws.com/"}, "names no queue"},
		{[]string{"key", "river", "digest", "-metadata", `{"periodic": true}`}, "records no occurrence (its inserting client had no middleware): its key names its job ID: give -job-id"},
		{[]string{"key", "river", "digest", "-metadata", `{"periodic": true, "jobonce_occurrence": 5}`}, `its metadata field "jobonce_occurrence" holds 5, not an RFC 3339 time`},
		{[]string{"key", "river", "digest", "-metadata", `[1]`}, "-metadata is not a JSON object"},
		{[]string{"key", "river", "digest", "-metadata", `{"jobonce_key": ""}`}, "key: the key is empty: jobonce: invalid key, which the adapter rejects"},
		{[]string{"key", "asynq"}, "key takes ADAPTER and NAME, got 1 arguments"},
		{[]string{"key", "asynq", "email", "-redis", "redis://127.0.0.1:6379/0"}, "-redis (a flag of check, list, inspect, release and forget, not of key)"},
	} {
		r := runCLI(t, strings.NewReader("{}"), nil, c.args...)
		requireOneErrorLine(t, r, c.want)
	}
}

// TestTheStoredKeyKeyPrintsIsTheOneInspectReads: a job run through a Guard
// under its adapter's default key is found by inspect, on Redis and on
// PostgreSQL, at the stored key the key command prints for it.
func TestTheStoredKeyKeyPrintsIsTheOneInspectReads(t *testing.T) {
	payload := `{"user": 42}`
	key := asynqonce.DefaultKey(asynq.NewTask("email:welcome", []byte(payload)))

	redis := newReleaseEnv(t, core.Config{})
	_, err := redis.guard.Do(context.Background(), key, func(context.Context) error { return nil })
	require.NoError(t, err)
	r := runCLI(t, strings.NewReader(payload), nil, "key", "asynq", "email:welcome", "-prefix", redis.prefix)
	require.Zero(t, r.status, "%s", r)
	form := printedStoredKey(t, r.stdout)
	r = runCLI(t, nil, nil, redis.args("inspect", form)...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done")

	pg := newPgEnv(t, core.Config{PlainKeys: true})
	require.Equal(t, core.Ran, runJob(t, pg.guard, key))
	r = runCLI(t, strings.NewReader(payload), nil, "key", "asynq", "email:welcome", "-plain")
	require.Zero(t, r.status, "%s", r)
	r = pg.run(t, "inspect", printedStoredKey(t, r.stdout))
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done")
}

// TestKeyTakesRiverArgsAsPsqlPrintsThem: psql and echo end the args with a
// newline, which jsonb never prints: it is not part of the args. Another
// adapter's payload keeps its newline, and the command says so.
func TestKeyTakesRiverArgsAsPsqlPrintsThem(t *testing.T) {
	t.Parallel()
	want := riveronce.DefaultKey(&rivertype.JobRow{Kind: "email_welcome", EncodedArgs: []byte(`{"user_id": 42}`), Metadata: []byte(`{}`)})
	r := runCLI(t, strings.NewReader("{\"user_id\": 42}\n"), nil, "key", "river", "email_welcome")
	require.Zero(t, r.status, "%s", r)
	require.Equal(t, want, printedKey(t, r.stdout))
	require.NotContains(t, r.stdout, "note:")

	r = runCLI(t, strings.NewReader("{\"user\": 42}\n"), nil, "key", "asynq", "email:welcome")
	require.Zero(t, r.status, "%s", r)
	require.Equal(t, asynqonce.DefaultKey(asynq.NewTask("email:welcome", []byte("{\"user\": 42}\n"))), printedKey(t, r.stdout))
	require.Contains(t, r.stdout, "note: the payload ends with a newline, which its hash includes")
}

// TestKeyNamesBothKeysOfAWatermillMessageUnderLegacyDefaultKeys: a real
// router whose middleware has LegacyDefaultKeys keeps a message done under
// its key and under the earlier release's key, and a redelivery is skipped
// while either is. key prints both, each found done by inspect, and a
// message whose both markers forget deleted runs again.
func TestKeyNamesBothKeysOfAWatermillMessageUnderLegacyDefaultKeys(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	var outs testenv.Outcomes
	g, err := core.New(e.store, &core.Config{KeyPrefix: e.prefix, Observer: outs.Observe, Logger: testenv.Quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(watermillonce.MustMiddleware(g, &watermillonce.Config{LegacyDefaultKeys: true}))
	router.AddConsumerHandler("ship", "orders", ps, func(*message.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	const payload = `{"order": 7}`
	deliver := func(want core.Outcome, n int64) {
		t.Helper()
		require.NoError(t, ps.Publish("orders", message.NewMessage(watermill.NewUUID(), message.Payload(payload))))
		require.Eventually(t, func() bool { return outs.Get(want) >= n }, 30*time.Second, 10*time.Millisecond)
	}
	deliver(core.Ran, 2) // reported under each key

	r := runCLI(t, strings.NewReader(payload), nil, "key", "watermill", "ship", "-topic", "orders", "-prefix", e.prefix)
	require.Zero(t, r.status, "%s", r)
	legacy := regexp.MustCompile(`(?m)^legacy stored key: (0x[0-9a-f]+) `).FindStringSubmatch(r.stdout)
	require.NotNil(t, legacy, "no legacy stored key in:\n%s", r.stdout)
	stored := []string{printedStoredKey(t, r.stdout), legacy[1]}
	for _, form := range stored {
		r := runCLI(t, nil, nil, e.args("inspect", form)...)
		require.Zero(t, r.status, "%s", r)
		require.Contains(t, r.stdout, "state: done")
	}
	r = runCLI(t, nil, nil, e.args("forget", "-yes", stored[0])...)
	require.Zero(t, r.status, "%s", r)
	deliver(core.Duplicate, 1) // the earlier key's marker still skips it
	r = runCLI(t, nil, nil, e.args("forget", "-yes", stored[1])...)
	require.Zero(t, r.status, "%s", r)
	deliver(core.Ran, 4)
}

// TestKeyReadsAnEmptyPayloadFromDevNull: stdin from /dev/null, as a CI job
// or a shell's < /dev/null gives it, is an empty payload, not a terminal.
func TestKeyReadsAnEmptyPayloadFromDevNull(t *testing.T) {
	t.Parallel()
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	t.Cleanup(func() { _ = null.Close() })
	r := runCLI(t, null, nil, "key", "asynq", "report")
	require.Zero(t, r.status, "%s", r)
	require.Equal(t, asynqonce.DefaultKey(asynq.NewTask("report", nil)), printedKey(t, r.stdout))
}
