package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// channelless returns a client of a Redis user of the test's own that may
// run every command on every key but use no channel (Redis 7's default for
// a new user: resetchannels), deleted at cleanup.
func channelless(t *testing.T) *redis.Client {
	t.Helper()
	admin := testenv.Redis(t, testenv.Prefix(t))
	ctx := context.Background()
	user, password := "jobonce-test-"+testenv.RandomID(4), testenv.RandomID(8)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+password, "~*", "resetchannels", "+@all").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	opt.Username, opt.Password = user, password
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err())
	return c
}

// TestEndOfAnAwaitedClaimIsAnsweredWhenTheSignalIsRefused: a user that may
// use no channel completes and releases claims that copies await: the
// complete writes its marker and answers nil (a re-sent complete under
// LegacyMarkers, which cannot tell its marker from another's, would answer
// LeaseLost), the release deletes its claim and answers nil; the publish
// that the user may not make is left out.
func TestEndOfAnAwaitedClaimIsAnsweredWhenTheSignalIsRefused(t *testing.T) {
	client := channelless(t)
	prefix := testenv.Prefix(t)
	ctx := context.Background()
	for _, legacy := range []bool{false, true} {
		s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, LegacyMarkers: legacy, SkipEvictionCheck: true})
		require.NoError(t, err)
		for _, end := range []string{"complete", "release"} {
			key := prefix + end + map[bool]string{false: "", true: ":legacy"}[legacy]
			h := holdKey(t, s, key)
			r, err := s.Await(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateRunning, r.State, "the key is marked awaited")
			if end == "complete" {
				require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: h.token, Retention: time.Minute, Fence: h.fence}),
					"legacy %v: a refused signal changes no outcome", legacy)
				r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
				require.NoError(t, err)
				require.Equal(t, driver.StateDone, r.State)
			} else {
				require.NoError(t, s.Release(ctx, key, h.token), "legacy %v: a refused signal changes no outcome", legacy)
				r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
				require.NoError(t, err)
				require.Equal(t, driver.StateClaimed, r.State)
			}
		}
	}
}

// TestJobOfAnAwaitedClaimIsRanWhenTheSignalIsRefused: under LegacyMarkers,
// a job whose claim a copy awaits ran and is reported Ran, and the copy is
// a Duplicate, though the user may not publish.
func TestJobOfAnAwaitedClaimIsRanWhenTheSignalIsRefused(t *testing.T) {
	client := channelless(t)
	prefix := testenv.Prefix(t)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, LegacyMarkers: true, SkipEvictionCheck: true})
	require.NoError(t, err)
	g, err := core.New(s, &core.Config{KeyPrefix: prefix, PlainKeys: true, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	ctx := context.Background()
	release := make(chan struct{})
	first := make(chan core.Result, 1)
	started := make(chan struct{})
	go func() {
		res, _ := g.Run(ctx, core.Job{Key: "job"}, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return nil, nil
		})
		first <- res
	}()
	<-started
	second := waiting(ctx, g, "job", time.Minute)
	awaitedBy(t, testenv.Redis(t, prefix), prefix+"job")
	close(release)
	require.Equal(t, core.Ran, (<-first).Outcome, "the job ran and its marker is written")
	require.Equal(t, core.Duplicate, (<-second).Outcome)
}

// TestListenerThatMayNotSubscribeSaysSoOnce: a Listener whose user may use
// no channel answers Add with an error naming the ACL the signal needs
// (the copy then polls), and the Store says so once, at Warn.
func TestListenerThatMayNotSubscribeSaysSoOnce(t *testing.T) {
	client := channelless(t)
	var warnings testenv.Warnings
	s, err := redisstore.New(client, &redisstore.Config{Logger: warnings.Logger(), SkipEvictionCheck: true})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := s.Listen(ctx, func(string) {})
	require.NoError(t, err)
	defer l.Close()
	prefix := testenv.Prefix(t)
	for _, key := range []string{prefix + "a", prefix + "b"} {
		err := l.Add(ctx, key)
		require.Error(t, err, "a refused subscription is no success")
		require.ErrorContains(t, err, "allchannels")
	}
	var refused []string
	for _, m := range warnings.Messages() {
		if strings.Contains(m, "channel") {
			refused = append(refused, m)
		}
	}
	require.Len(t, refused, 1, "said once: %q", warnings.Messages())
	require.Contains(t, refused[0], "&jobonce:*")
	require.Contains(t, refused[0], "allchannels")
}

// TestNewSaysWhenTheUserMayNotUseTheSignalsChannels: New checks the
// channels under the default KeyPrefix and names the ACL the completion
// signal needs when the user may not use them; a user who may says
// nothing of it.
func TestNewSaysWhenTheUserMayNotUseTheSignalsChannels(t *testing.T) {
	var refused testenv.Records
	_, err := redisstore.New(channelless(t), &redisstore.Config{Logger: refused.Logger()})
	require.NoError(t, err)
	var said []string
	for _, r := range refused.All() {
		if strings.Contains(r.Message, "&jobonce:*") && strings.Contains(r.Message, "allchannels") {
			said = append(said, r.Message)
		}
	}
	require.Len(t, said, 1, "%v", refused.All())

	var allowed testenv.Records
	_, err = redisstore.New(testenv.Redis(t, testenv.Prefix(t)), &redisstore.Config{Logger: allowed.Logger()})
	require.NoError(t, err)
	for _, r := range allowed.All() {
		require.NotContains(t, r.Message, "channel")
	}
}

// TestUserOfThePrefixAloneRecordsAndAwaitsJobs: a Redis user whose ACL
// allows the keys and channels under the Guard's KeyPrefix alone
// (~<prefix>* &<prefix>*, least privilege) completes, releases and awaits
// claims: every key a script names, the awaited mark included, is under
// the prefix. A mark outside it made every complete and release fail
// (NOPERM), so every job ran unrecorded and ran again on redelivery.
func TestUserOfThePrefixAloneRecordsAndAwaitsJobs(t *testing.T) {
	prefix := testenv.Prefix(t)
	admin := testenv.Redis(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	user, password := "jobonce-test-"+testenv.RandomID(4), testenv.RandomID(8)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+password, "~"+prefix+"*", "&"+prefix+"*", "+@all").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	opt.Username, opt.Password = user, password
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true})
	require.NoError(t, err)
	for _, plain := range []bool{false, true} {
		g, err := core.New(s, &core.Config{KeyPrefix: prefix, PlainKeys: plain, Logger: quiet, WaitingShare: 1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = g.Close() })
		key := fmt.Sprintf("job-%v", plain)

		out, err := g.Do(ctx, key+":failing", func(context.Context) error { return errors.New("boom") })
		require.Error(t, err)
		require.Equal(t, core.Failed, out)
		out, err = g.Do(ctx, key+":failing", func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "plain %v: the failed run's claim was released", plain)

		release := make(chan struct{})
		started := make(chan struct{})
		first := make(chan core.Outcome, 1)
		go func() {
			out, _ := g.Do(ctx, key, func(context.Context) error {
				close(started)
				<-release
				return nil
			})
			first <- out
		}()
		<-started
		second := waiting(ctx, g, key, time.Minute)
		require.Eventually(t, func() bool {
			keys, _ := admin.Keys(ctx, prefix+"*\x00awaited").Result()
			return len(keys) > 0
		}, 10*time.Second, time.Millisecond, "plain %v: the waiting copy marked the key awaited", plain)
		close(release)
		require.Equal(t, core.Ran, <-first, "plain %v: the job ran and its marker is written", plain)
		require.Equal(t, core.Duplicate, (<-second).Outcome, "plain %v", plain)
		out, err = g.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "plain %v", plain)
	}
}
