package main

import (
	"testing"
)

// go-redis retries a refused dial and logs each failure (pool.go) to
// stderr; pgx tries each address of the host. The command prints its one
// line, whatever the client did.
func TestAnUnreachableStorePrintsOneLineOnStderr(t *testing.T) {
	redisDown := "redis://127.0.0.1:" + closedPort(t) + "/0"
	pgDown := "postgres://postgres@127.0.0.1:" + closedPort(t) + "/test?sslmode=disable&connect_timeout=5"
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"redis check", []string{"REDIS_URL=" + redisDown}, []string{"check"}, "jobonce: redisstore: INFO on 127.0.0.1:"},
		{"redis inspect", nil, []string{"-redis", redisDown, "inspect", "job-1"}, "connect: connection refused"},
		{"redis list", nil, []string{"list", "-redis", redisDown}, "connect: connection refused"},
		{"redis release", nil, []string{"release", "job-1", "-redis", redisDown}, "connect: connection refused"},
		{"redis forget", nil, []string{"forget", "-yes", "job-1", "-redis", redisDown}, "connect: connection refused"},
		{"postgres check", nil, []string{"-postgres", pgDown, "check"}, "connect: connection refused"},
		{"postgres inspect", []string{"DATABASE_URL=" + pgDown}, []string{"inspect", "job-1"}, "connect: connection refused"},
		{"postgres list", nil, []string{"list", "-postgres", pgDown}, "connect: connection refused"},
		{"postgres release", nil, []string{"release", "-postgres", pgDown, "job-1"}, "connect: connection refused"},
		{"postgres forget", nil, []string{"forget", "-postgres", pgDown, "-yes", "job-1"}, "connect: connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, nil, c.env, c.args...)
			requireOneErrorLine(t, r, c.want)
		})
	}
}
