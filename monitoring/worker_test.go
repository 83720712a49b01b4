package monitoring_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// The workers' settings: a short Lease and Retention, so that a claim
// lapses, and a duplicate arrives more than half a Retention late, within
// seconds.
const (
	lease     = 3 * time.Second
	retention = 10 * time.Second
	keyPrefix = "e2e:"
)

// worker is a worker of the test's own process, whose Guards keep their
// claims in one Redis and whose metrics Prometheus scrapes over HTTP on
// loopback, through the OpenTelemetry Prometheus exporter.
type worker struct {
	addr   string        // host:port of its /metrics
	client *redis.Client // the Guards' Redis client
	// guard is the worker's Guard (consumer "e2e"); lapsing's claims lapse
	// after 50ms, unrenewed (consumer "e2e-lapsing"); shadow runs in shadow
	// mode (consumer "e2e-shadow"); failOpen runs jobs unguarded when the
	// store cannot be reached (consumer "e2e-failopen").
	guard, lapsing, shadow, failOpen *core.Guard
}

func startWorker(t *testing.T, redisAddr string) *worker {
	t.Helper()
	reg := promclient.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	client := redis.NewClient(&redis.Options{Addr: redisAddr, DialTimeout: 250 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, &redisstore.Config{CheckEvery: 250 * time.Millisecond, MeterProvider: mp, Logger: testenv.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	guard := func(cfg core.Config) *core.Guard {
		cfg.KeyPrefix, cfg.MeterProvider, cfg.Logger, cfg.StoreTimeout = keyPrefix, mp, testenv.Quiet, time.Second
		return testenv.NewGuard(t, store, &cfg)
	}
	return &worker{
		addr:     ln.Addr().String(),
		client:   client,
		guard:    guard(core.Config{Lease: lease, Retention: retention, Consumer: "e2e"}),
		lapsing:  guard(core.Config{Lease: 50 * time.Millisecond, Retention: retention, DisableHeartbeat: true, Consumer: "e2e-lapsing"}),
		shadow:   guard(core.Config{Shadow: true, Consumer: "e2e-shadow"}),
		failOpen: guard(core.Config{FailOpen: true, Consumer: "e2e-failopen"}),
	}
}

// traffic runs jobs of kind "email" through the worker's Guard, each
// delivered twice, until stop is called: outcomes, durations and lags for
// the dashboard, and failed-closed deliveries while Redis is down.
func (w *worker) traffic() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		nop := func(context.Context) ([]byte, error) { return nil, nil }
		for i := 0; ctx.Err() == nil; i++ {
			job := core.Job{Key: fmt.Sprint("email-", i), Kind: "email", Source: "e2e"}
			_, _ = w.guard.Run(ctx, job, nop)
			_, _ = w.guard.Run(ctx, job, nop)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// blocked starts a job of key on g that runs until the returned release
// is called, and waits until it runs; done then reports its outcome.
func blocked(t *testing.T, g *core.Guard, key string) (release func(), done <-chan core.Outcome) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	out := make(chan core.Outcome, 1)
	go func() {
		o, _ := g.Do(context.Background(), key, func(context.Context) error {
			close(started)
			<-unblock
			return nil
		})
		out <- o
	}()
	select {
	case <-started:
	case o := <-out:
		t.Fatalf("job %s did not run: %s", key, o)
	}
	return sync.OnceFunc(func() { close(unblock) }), out
}

// holderEnv names the Redis address of a holder process (see
// TestHolderProcess), and holderKeyEnv the key it holds.
const (
	holderEnv    = "JOBONCE_MONITORING_HOLDER_REDIS"
	holderKeyEnv = "JOBONCE_MONITORING_HOLDER_KEY"
)

// startHolder runs a worker process that claims key in the Redis at addr,
// with the workers' Lease and prefix, and holds it, renewing it, until it
// is killed; it returns once the process holds the key.
func startHolder(t *testing.T, addr, key string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHolderProcess$")
	cmd.Env = append(os.Environ(), holderEnv+"="+addr, holderKeyEnv+"="+key)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if strings.TrimSpace(lines.Text()) == "held" {
			go func() { _, _ = bufio.NewReader(stdout).WriteTo(os.Stderr) }()
			return cmd
		}
	}
	t.Fatalf("the holder process ended before it held %s: %v", key, cmd.Wait())
	return nil
}

// TestHolderProcess is the worker process startHolder runs: it claims the
// key and holds it until it is killed. Run alone, it skips.
func TestHolderProcess(t *testing.T) {
	addr := os.Getenv(holderEnv)
	if addr == "" {
		t.Skip("run by TestEachAlertFiresOnARealPrometheus as a worker that holds a claim")
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	store, err := redisstore.New(client, &redisstore.Config{CheckEvery: -1, Logger: testenv.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	g := testenv.NewGuard(t, store, &core.Config{Lease: lease, Retention: retention, KeyPrefix: keyPrefix})
	_, err = g.Do(context.Background(), os.Getenv(holderKeyEnv), func(ctx context.Context) error {
		fmt.Println("held")
		time.Sleep(time.Hour) // until killed
		return errors.New("the holder was not killed")
	})
	t.Fatal(err)
}
