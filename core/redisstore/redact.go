package redisstore

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redacted returns err's message fit to log: the password in client's
// options, should a server or proxy quote it back, replaced by "xxxxx".
func redacted(err error, client redis.UniversalClient) string {
	msg := err.Error()
	if pw := password(client); pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

// redactedError returns err, or when its message holds the password in
// client's options, an error of the same message without it (see redacted).
func redactedError(err error, client redis.UniversalClient) error {
	if msg := redacted(err, client); msg != err.Error() {
		return errors.New(msg)
	}
	return err
}

// password returns the password in client's options, "" when it has none or
// they cannot be read.
func password(client redis.UniversalClient) string {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().Password
	case *redis.ClusterClient:
		return c.Options().Password
	case *redis.Ring:
		return c.Options().Password
	}
	return ""
}
