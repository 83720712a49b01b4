package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

var keyCommand = &command{
	name:    "key",
	args:    []string{"ADAPTER", "NAME"},
	keyed:   true,
	offline: true,
	summary: "print the key and stored key an adapter gives a job by default",
	about: `key prints the key an adapter gives a job under its default configuration, and the stored key
a Guard with -prefix and -plain keeps it under, in the form inspect, release and forget take. It
reads no store. ADAPTER and NAME are one of:

  asynq TYPE          a task of type TYPE; the payload is the task's payload
  sqs QUEUE           a message of the queue QUEUE (its URL, or its name); the payload is its body;
                      on a FIFO queue (a name ending in .fifo) the key is its -message-id instead
  river KIND          a job of kind KIND; the payload is its args as River's river_job.args column
                      prints them (PostgreSQL's jsonb form: {"a": 1, "b": "x"}; whitespace around
                      them is dropped), and -metadata its metadata column, which may hold a key
                      recorded at insert or a periodic job's occurrence
  watermill HANDLER   a message handled by the handler HANDLER from -topic; the payload is its payload;
                      the legacy key is the one Config.LegacyDefaultKeys claims too

The payload is read from -payload FILE, or from stdin when -payload is - (the default), byte for
byte: a newline at its end is part of it (printf, not echo). A key that
Config.Key, a key attribute (SQS), a Keyer's key recorded without the middleware (River), or
PeriodicTypes (Asynq) names is not computed here: pass that key to inspect as it is.`,
	flags: func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.payload, "payload", "-", "the file holding the payload (an SQS body, River args); - reads stdin")
		fs.StringVar(&o.topic, "topic", "", "watermill: the topic the handler subscribes to")
		fs.StringVar(&o.messageID, "message-id", "", "sqs: the MessageId of a message of a FIFO queue")
		fs.StringVar(&o.metadata, "metadata", "", "river: the job's metadata (river_job.metadata, JSON)")
		fs.Int64Var(&o.jobID, "job-id", 0, "river: the job's ID, which keys a periodic job inserted without the middleware")
	},
	run: runKey,
}

// adapterFlags names the flags of key that apply to one adapter only.
var adapterFlags = map[string]string{"topic": "watermill", "message-id": "sqs", "metadata": "river", "job-id": "river"}

func runKey(_ context.Context, c *invocation) error {
	adapter, name := c.keys[0], c.keys[1]
	for _, flagName := range slices.Sorted(maps.Keys(adapterFlags)) {
		if owner := adapterFlags[flagName]; c.set[flagName] && owner != adapter {
			return fmt.Errorf("key: -%s is for %s jobs, not %s", flagName, owner, adapter)
		}
	}
	if name == "" {
		return errors.New("key: NAME is empty")
	}
	payload := &payloadSource{path: c.opt.payload, in: c.in}
	var key, legacy string
	var err error
	switch adapter {
	case "asynq":
		key, err = asynqKey(name, payload)
	case "sqs":
		key, err = sqsKey(name, c.opt.messageID, payload)
	case "river":
		key, err = riverKey(name, c.opt.metadata, c.opt.jobID, c.set["job-id"], payload)
	case "watermill":
		key, legacy, err = watermillKey(name, c.opt.topic, c.set["topic"], payload)
	default:
		return fmt.Errorf("key: unknown ADAPTER %q: give asynq, sqs, river or watermill", adapter)
	}
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if key == "" {
		return fmt.Errorf("key: the key is empty: %w, which the adapter rejects", core.ErrInvalidKey)
	}
	namer := newKeyNamer(c.opt.prefix, c.opt.plain)
	stored, err := namer.derive(key, c.opt.plain)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	fmt.Fprintf(c.out, "key: %q\n", key)
	fmt.Fprintf(c.out, "stored key: %s (reads %q)\n", storedForm(stored), stored)
	if legacy != "" {
		legacyStored, err := namer.derive(legacy, c.opt.plain)
		if err != nil {
			return fmt.Errorf("key: %w", err)
		}
		fmt.Fprintf(c.out, "legacy key: %q (the key releases before the topic gave it, which Config.LegacyDefaultKeys claims too: while it is done, the message is skipped; forget both)\n", legacy)
		fmt.Fprintf(c.out, "legacy stored key: %s (reads %q)\n", storedForm(legacyStored), legacyStored)
	}
	if payload.newline && adapter != "river" {
		fmt.Fprintln(c.out, "note: the payload ends with a newline, which its hash includes; if the job's payload has none, give it without one (printf, not echo)")
	}
	return nil
}

// payloadSource reads a job's payload, only when its key needs it.
type payloadSource struct {
	path    string // a file, or "-" for in
	in      io.Reader
	newline bool // the payload read ends with a newline
}

func (p *payloadSource) read() ([]byte, error) {
	b, err := p.readAll()
	p.newline = bytes.HasSuffix(b, []byte("\n"))
	return b, err
}

func (p *payloadSource) readAll() ([]byte, error) {
	if p.path != "-" {
		b, err := os.ReadFile(p.path)
		if err != nil {
			return nil, fmt.Errorf("-payload: %w", err)
		}
		return b, nil
	}
	if p.in == nil {
		return nil, nil
	}
	if isTerminal(p.in) {
		return nil, errors.New("the payload is read from stdin, a terminal: give -payload FILE, or pipe it in (-payload /dev/null for none)")
	}
	b, err := io.ReadAll(p.in)
	if err != nil {
		return nil, fmt.Errorf("reading the payload from stdin: %w", err)
	}
	return b, nil
}

// asynqKey returns asynqonce.DefaultKey of a task of type typ.
func asynqKey(typ string, payload *payloadSource) (string, error) {
	b, err := payload.read()
	if err != nil {
		return "", err
	}
	return jobkey.Default(typ, b), nil
}

// sqsKey returns sqsonce.DefaultKey of a message of queue (a URL or a name).
func sqsKey(queue, messageID string, payload *payloadSource) (string, error) {
	name, ok := jobkey.SQSQueueName(queue)
	if !ok {
		return "", fmt.Errorf("QUEUE %q names no queue", queue)
	}
	if jobkey.SQSFIFO(name) {
		if messageID == "" {
			return "", fmt.Errorf("%s is a FIFO queue, whose messages are keyed by their MessageId: give -message-id", name)
		}
		return jobkey.SQSFIFOKey(name, messageID), nil
	}
	if messageID != "" {
		return "", fmt.Errorf("%s is a standard queue, whose messages are keyed by their body: -message-id is for FIFO queues", name)
	}
	b, err := payload.read()
	if err != nil {
		return "", err
	}
	return jobkey.Default(name, b), nil
}

// riverKey returns riveronce.DefaultKey of a job of kind with metadata and
// job ID id (idSet when given).
func riverKey(kind, metadata string, id int64, idSet bool, payload *payloadSource) (string, error) {
	md := []byte(metadata)
	if metadata != "" && !jsonObject(md) {
		return "", fmt.Errorf("-metadata is not a JSON object: %q", metadata)
	}
	if key, ok := jobkey.RiverMetadataKey(md); ok {
		return key, nil
	}
	var args []byte
	switch p, periodic := jobkey.ReadPeriodic(md); {
	case periodic && p.Occurrence == "" && !idSet:
		why := "records no occurrence (its inserting client had no middleware)"
		if p.Unusable != nil {
			why = "its " + p.Unusable.Error()
		}
		return "", fmt.Errorf("the metadata marks a periodic job but %s: its key names its job ID: give -job-id", why)
	case periodic && (p.Occurrence == "" || p.ID != ""):
		// keyed by its job ID, or by its periodic job's ID and occurrence
	default:
		var err error
		if args, err = payload.read(); err != nil {
			return "", err
		}
		args = bytes.TrimSpace(args) // jsonb prints none around the args; psql and echo add a newline
	}
	if key, ok, _ := jobkey.RiverPeriodicKey(kind, id, args, md); ok {
		return key, nil
	}
	return jobkey.Default(kind, args), nil
}

// jsonObject reports whether b holds one JSON object.
func jsonObject(b []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}

// watermillKey returns watermillonce.DefaultKey of a message handled by
// handler from topic, and the key that Config.LegacyDefaultKeys claims it
// under too.
func watermillKey(handler, topic string, topicSet bool, payload *payloadSource) (key, legacy string, err error) {
	if !topicSet {
		return "", "", errors.New("a Watermill key names the topic the handler subscribes to: give -topic")
	}
	b, err := payload.read()
	if err != nil {
		return "", "", err
	}
	sum := core.Fingerprint(b)
	return jobkey.WatermillKey(handler, topic, sum), jobkey.WatermillLegacyKey(handler, sum), nil
}
