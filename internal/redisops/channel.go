package redisops

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ChannelAllowed reports whether the client's user may use channel, which
// the completion signal needs for the keys' channels (an ACL grants
// publishing and subscribing together): it publishes an empty message on
// it (SPUBLISH on a Cluster client) and reports false when the server
// refuses it (NOPERM). Publish on a channel no key has, such as a Guard's
// KeyPrefix alone: a listener of that channel would read it as a
// notification.
func ChannelAllowed(ctx context.Context, client redis.UniversalClient, channel string) (bool, error) {
	client, err := BoundedBy(ctx, client)
	if err != nil {
		return false, err
	}
	if _, cluster := client.(*redis.ClusterClient); cluster {
		err = client.SPublish(ctx, channel, "").Err()
	} else {
		err = client.Publish(ctx, channel, "").Err()
	}
	switch {
	case err == nil:
		return true, nil
	case redis.HasErrorPrefix(err, "NOPERM"):
		return false, nil
	}
	return false, err
}
