package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobonce/jobonce/core/driver"
)

var (
	//go:embed claim.lua
	claimLua string
	//go:embed extend.lua
	extendLua string
	//go:embed complete.lua
	completeLua string
	//go:embed release.lua
	releaseLua string

	claimScript    = redis.NewScript(claimLua)
	extendScript   = redis.NewScript(extendLua)
	completeScript = redis.NewScript(completeLua)
	releaseScript  = redis.NewScript(releaseLua)
)

// Config configures a Store. A nil *Config gives the defaults. New copies
// the Config, so later changes to it have no effect.
type Config struct {
	// Logger receives New's warnings and those of the checks at run time
	// (see CheckEvery). Defaults to slog.Default().
	Logger *slog.Logger

	// SkipEvictionCheck skips New's read of the server's settings. The first
	// check then runs within the first claim. Defaults to false.
	SkipEvictionCheck bool

	// Strict makes New return an error where it would warn. It refuses a
	// server whose settings it cannot read within 2s; that error wraps
	// driver.ErrUnreachable unless the server answered. It refuses a server
	// that can lose done markers (an eviction policy but noeviction,
	// neither AOF nor RDB snapshots) or that is a replica; that error
	// matches driver.ErrStoreRisk. Ready then reports such a risk too. It
	// cannot be set with SkipEvictionCheck. Set it in production.
	// Defaults to false.
	Strict bool

	// CheckEvery is how often the Store reads its servers' state again,
	// within a claim, which it delays by 250ms at most. Each restart,
	// failover and risky setting it notices is logged once at Warn and
	// counted in jobonce.redis.events. Negative turns it off.
	// Defaults to 30s.
	CheckEvery time.Duration

	// MeterProvider receives jobonce.redis.events and jobonce.redis.risks.
	// Defaults to the global otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// WaitReplicas makes a claim, a done marker and a renewed lease count
	// only once this many replicas acknowledged the write (WAIT, in the
	// write's own pipeline). A claim not acknowledged within WaitTimeout is
	// released, with an error matching core.ErrUnreplicated: the job does
	// not run, even under FailOpen. A done marker not acknowledged is sent
	// again until the Guard's StoreTimeout. Defaults to 0: a write counts
	// once the primary made it, and a failover before it replicated loses
	// it. docs/operations.md explains the failover cases.
	WaitReplicas int

	// WaitAOF also waits until the primary, and WaitReplicas replicas,
	// wrote the write to the append-only file (WAITAOF, Redis 7.2 and
	// later). A restart of the primary then keeps it. Defaults to false.
	WaitAOF bool

	// WaitTimeout bounds the wait for acknowledgements. Keep it well under
	// the Guard's StoreTimeout. Defaults to 1s.
	WaitTimeout time.Duration

	// LegacyMarkers writes done markers without the writer's id, for the
	// first step of a rolling upgrade from a release that cannot read it.
	// Markers of either format are read. Under it, a complete sent again
	// after a lost reply answers driver.ErrLeaseLost. Defaults to false.
	LegacyMarkers bool
}

// Store is a driver.Store and driver.BatchStore on Redis. It is safe for
// concurrent use.
type Store struct {
	client redis.UniversalClient
	logger *slog.Logger

	wait               waitFor // acknowledgement of writes; off when zero
	watch              *watch  // restarts, failovers and risky settings
	leases, retentions boxCache
	legacy             bool        // Config.LegacyMarkers
	strict             bool        // Config.Strict
	retries            bool        // the client sends a failed command again (Options.MaxRetries)
	cluster            bool        // a Cluster client: marks share their key's slot, notifications are sharded
	refused            atomic.Bool // a Listener's subscription was refused (NOPERM), and logged
}

var (
	_ driver.BatchStore = (*Store)(nil)
	_ driver.Notifier   = (*Store)(nil)
	_ driver.ReadyStore = (*Store)(nil)
)

// New returns a Store on client: a single-node, Sentinel (failover) or
// Cluster client, or a Ring. Unless Config.SkipEvictionCheck is set, New
// reads the server's settings and logs at Warn each risk that can lose
// done markers. It waits 2s at most for its reads; a read that fails is
// logged, and the first claim reads again. New also warns of a client made
// without ContextTimeoutEnabled. Under Config.Strict, a failed read or a
// risk is New's error instead.
//
// New returns an error for a nil client or an invalid Config, for
// WaitReplicas or WaitAOF on a Ring, and for WaitAOF on a server that
// refuses WAITAOF. docs/operations.md explains the checks.
func New(client redis.UniversalClient, cfg *Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("jobonce: redisstore: New: client is nil")
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("jobonce: redisstore: New: client is a nil %T", client)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WaitReplicas < 0 {
		return nil, fmt.Errorf("jobonce: redisstore: Config.WaitReplicas must not be negative, got %d", c.WaitReplicas)
	}
	if c.WaitTimeout < 0 {
		return nil, fmt.Errorf("jobonce: redisstore: Config.WaitTimeout must not be negative, got %s", c.WaitTimeout)
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = time.Second
	}
	if c.Strict && c.SkipEvictionCheck {
		return nil, errors.New("jobonce: redisstore: Config.Strict needs the check of the server's settings that Config.SkipEvictionCheck skips")
	}
	if _, ring := client.(*redis.Ring); ring {
		// A Ring routes a key-less WAIT to any shard, not to the connection
		// of the writes it must cover.
		if c.WaitReplicas > 0 {
			return nil, errors.New("jobonce: redisstore: Config.WaitReplicas needs a single-node, Sentinel or Cluster client, not a Ring")
		}
		if c.WaitAOF {
			return nil, errors.New("jobonce: redisstore: Config.WaitAOF needs a single-node, Sentinel or Cluster client, not a Ring")
		}
	}
	_, cluster := client.(*redis.ClusterClient)
	s := &Store{client: client, logger: c.Logger, wait: waitFor{replicas: c.WaitReplicas, aof: c.WaitAOF, timeout: c.WaitTimeout}, legacy: c.LegacyMarkers, strict: c.Strict, retries: retries(client), cluster: cluster}
	if c.CheckEvery == 0 {
		c.CheckEvery = 30 * time.Second
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	w, err := newWatch(c.CheckEvery, c.Logger, c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("jobonce: redisstore: Config.MeterProvider: %w", err)
	}
	s.watch = w
	warnContextTimeouts(c.Logger, client)
	if !c.SkipEvictionCheck || c.WaitAOF {
		if err := s.startUp(c.CheckEvery, !c.SkipEvictionCheck, c.WaitAOF); err != nil {
			return nil, err
		}
	}
	if c.Strict {
		if err := s.watch.strictRisks("New", true); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// CheckEviction returns the server's maxmemory-policy (CONFIG GET). Any
// policy but noeviction can evict done markers and let duplicates run.
func (s *Store) CheckEviction(ctx context.Context) (string, error) {
	res, err := s.client.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", err
	}
	return res["maxmemory-policy"], nil
}

// millis returns d in whole milliseconds, rounded up so that a key never
// expires before d has passed. Redis keeps expiries in milliseconds, so a
// duration under 1ms gives an error naming field.
func millis(field string, d time.Duration) (int64, error) {
	if d < time.Millisecond {
		return 0, fmt.Errorf("jobonce: redisstore: %s must be at least 1ms, got %s", field, d)
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms, nil
}

func (s *Store) claimArgs(req *driver.ClaimRequest) ([]any, error) {
	lease, err := millis("ClaimRequest.Lease", req.Lease)
	if err != nil {
		return nil, err
	}
	if s.wait.on() {
		return []any{ownerValue(req.Token), req.Fingerprint, s.leases.box(lease), "w"}, nil
	}
	return []any{ownerValue(req.Token), req.Fingerprint, s.leases.box(lease)}, nil
}

// Claim implements driver.Store in one round trip. A claimed key's fence
// comes from the Redis server's clock. With Config.WaitReplicas or WaitAOF,
// a claim, or a done marker it finds, counts only once acknowledged;
// otherwise the error matches core.ErrUnreplicated.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if s.wait.on() {
		replies, errs, _ := s.Batch(ctx, nil, []driver.ClaimRequest{req})
		return replies[0], errs[0]
	}
	defer s.checkIfDue(ctx)
	args, err := s.claimArgs(&req)
	if err != nil {
		return driver.ClaimReply{}, err
	}
	v, err := claimScript.Run(ctx, s.client, []string{req.Key}, args...).Result()
	if err != nil {
		return driver.ClaimReply{}, cancelled(ctx, err)
	}
	return claimReply(v)
}

func claimReply(v any) (driver.ClaimReply, error) {
	switch v := v.(type) {
	case int64:
		if v > 0 {
			return driver.ClaimReply{State: driver.StateClaimed, Fence: v}, nil
		}
	case []any:
		if len(v) == 2 {
			val, ok1 := v[0].(string)
			pttl, ok2 := v[1].(int64)
			if ok1 && ok2 {
				return parseValue(val, pttl)
			}
		}
	}
	return driver.ClaimReply{}, fmt.Errorf("jobonce: redisstore: unexpected claim reply %T", v)
}

// Extend implements driver.Store. It returns driver.ErrLeaseLost when token
// does not hold the claim on key.
func (s *Store) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	ms, err := millis("Extend lease", lease)
	if err != nil {
		return err
	}
	if s.wait.on() {
		errs, unacked := s.pipeline(ctx, 1, func(int) (*redis.Script, []string, []any, error) {
			return extendScript, []string{key}, []any{ownerValue(token), ms}, nil
		}, func(_ int, cmd *redis.Cmd) error { return tokenChecked(ctx, cmd) })
		return cmp.Or(errs[0], unacked[0])
	}
	return tokenChecked(ctx, extendScript.Run(ctx, s.client, []string{key}, ownerValue(token), ms))
}

// Complete implements driver.Store. The done marker names the claim that
// wrote it, so a complete sent again by that claim returns nil, and its
// acknowledgement is waited for anew. Under Config.LegacyMarkers, it
// returns driver.ErrLeaseLost instead. It returns driver.ErrLeaseLost when
// req.Token does not hold the claim.
func (s *Store) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if s.wait.on() {
		_, _, errs := s.Batch(ctx, []driver.CompleteRequest{req}, nil)
		return errs[0]
	}
	args, err := s.completeArgs(&req)
	if err != nil {
		return err
	}
	return tokenChecked(ctx, s.runMarked(ctx, completeScript, req.Key, args))
}

func (s *Store) completeArgs(req *driver.CompleteRequest) ([]any, error) {
	retention, err := millis("CompleteRequest.Retention", req.Retention)
	if err != nil {
		return nil, err
	}
	if s.cluster {
		return []any{ownerValue(req.Token), doneValue(req.Token, req.Fingerprint, req.Result, s.legacy), s.retentions.box(retention), sharded}, nil
	}
	return []any{ownerValue(req.Token), doneValue(req.Token, req.Fingerprint, req.Result, s.legacy), s.retentions.box(retention)}, nil
}

// boxCache keeps the last number boxed as an argument: a Guard sends the
// same lease and retention with every request, and boxing each anew costs
// an allocation.
type boxCache struct{ last atomic.Pointer[boxed] }

type boxed struct {
	n int64
	v any
}

func (c *boxCache) box(n int64) any {
	if b := c.last.Load(); b != nil && b.n == n {
		return b.v
	}
	b := &boxed{n, n}
	c.last.Store(b)
	return b.v
}

// Release implements driver.Store. It returns driver.ErrLeaseLost when
// token does not hold the claim on key.
func (s *Store) Release(ctx context.Context, key string, token driver.Token) error {
	return tokenChecked(ctx, s.runMarked(ctx, releaseScript, key, s.releaseArgs(token)))
}

func (s *Store) releaseArgs(token driver.Token) []any {
	if s.cluster {
		return []any{ownerValue(token), sharded}
	}
	return []any{ownerValue(token)}
}

// tokenChecked maps a token-checked script's 0 reply to driver.ErrLeaseLost.
func tokenChecked(ctx context.Context, cmd *redis.Cmd) error {
	n, err := cmd.Int64()
	if err != nil {
		return cancelled(ctx, err)
	}
	if n != 1 {
		return driver.ErrLeaseLost
	}
	return nil
}

// cancelled makes err, a failed call's error, wrap ctx's error when ctx is
// done and err does not say so already: a read that timed out or a
// connection that broke once the caller had given up is the caller's
// cancellation, not a store outage. Replies from the server are left as they
// are. While ctx is live, go-redis's pool timeout (every connection busy
// with calls the server does not answer) is wrapped in
// driver.ErrUnreachable, which says the server could not be reached.
func cancelled(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil && errors.Is(err, redis.ErrPoolTimeout) {
		return fmt.Errorf("%w: %w", driver.ErrUnreachable, err)
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return err
	}
	return fmt.Errorf("jobonce: redisstore: %w: %w", cerr, err)
}

// retries reports whether client sends a command again after a failed
// attempt: go-redis's MaxRetries, normalised when the client is made (-1
// there is 0 here, none), for the clients whose options it can read, and
// true for any other client, which is the cautious answer.
func retries(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		return c.Options().MaxRetries > 0
	}
	return true
}
