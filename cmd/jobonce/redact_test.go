package main

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/testenv"
)

// closedPort returns a loopback port where nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	return port
}

func TestNoMessageShowsTheRedisPassword(t *testing.T) {
	const password = "s3cr3t-pw"
	fast := "?dial_timeout=200ms&max_retries=-1"
	down := "127.0.0.1:" + closedPort(t)
	hashed := `"redis://xxxxx@redis.internal:6379/0" holds a '#', where a URL ends (its fragment), so a password holding one would be cut there: percent-encode '#' as %23 in the password`
	hashedDigits := `"redis://xxxxx@127.0.0.1:6379/0" holds a '#'`
	for _, c := range []struct {
		name, url string
		args      []string
		secrets   []string // besides password
		want      string   // in the output, so the case ran as meant
	}{
		{"wrong invocation", "redis://app:" + password + "@127.0.0.1:6379/0", []string{"-nosuchflag"}, nil, "$REDIS_URL"},
		{"bad port", "redis://app:" + password + "@127.0.0.1:notaport/0", []string{"check"}, nil, "invalid port"},
		{"bad port on the command line", "", []string{"-redis", "redis://app:" + password + "@127.0.0.1:notaport/0", "check"}, nil, "invalid port"},
		{"slash in the password", "redis://app:s3cr3t/pw@127.0.0.1:6379/0", []string{"check"}, []string{"s3cr3t/pw", "s3cr3t"}, "-redis"},
		{"escaped password", "redis://app:s3cr3t%40pw@127.0.0.1:notaport/0", []string{"check"}, []string{"s3cr3t%40pw", "s3cr3t@pw"}, "invalid port"},
		{"user without password", "redis://" + password + "@127.0.0.1:notaport/0", []string{"check"}, nil, "invalid port"},
		{"bad scheme", "http://app:" + password + "@127.0.0.1:6379/0", []string{"check"}, nil, "scheme"},
		{"unreachable host", "redis://app:" + password + "@" + down + "/0" + fast, []string{"check"}, nil, down},
		{"unreachable host, inspect", "redis://app:" + password + "@" + down + "/0" + fast, []string{"inspect", "job-1"}, nil, down},
		{"unreachable host, list", "redis://app:" + password + "@" + down + "/0" + fast, []string{"list"}, nil, down},
		{"unreachable cluster, list", "redis://app:" + password + "@" + down + fast + "&addr=" + down, []string{"list"}, nil, down},
		{"unreachable cluster, inspect", "redis://app:" + password + "@" + down + fast + "&addr=" + down, []string{"inspect", "job-1"}, nil, down},
		{"bad option in a cluster URL", "redis://app:" + password + "@" + down + "?addr=" + down + "&db=1", []string{"list"}, nil, "-redis: "},
		{"hash in the password, list", "redis://alice:Tr0ub4dor#3xyz@redis.internal:6379/0", []string{"list"}, []string{"Tr0ub4dor", "3xyz", "alice"}, "-redis: " + hashed},
		{"unknown host", "redis://app:" + password + "@no-such-host.invalid:6379/0" + fast, []string{"release", "job-1"}, nil, "no-such-host.invalid"},
		{"wrong password", "redis://app:" + password + "@" + strings.TrimPrefix(testenv.RedisURL(), "redis://"), []string{"check"}, nil, "jobonce: "},
		{"question mark in a password of digits", "redis://:4711?s3cr3t@127.0.0.1:6379/0", []string{"inspect", "job-1"}, []string{"4711", "s3cr3t"}, "unexpected option"},
		{"slash in a password of digits", "redis://alice:2024/s3cr3t@127.0.0.1:6379/0", []string{"release", "job-1"}, []string{"2024", "s3cr3t", "alice"}, "invalid URL path"},
		{"hash in the password, check", "redis://alice:Tr0ub4dor#3xyz@redis.internal:6379/0", []string{"check"}, []string{"Tr0ub4dor", "3xyz", "alice"}, "-redis: " + hashed},
		{"hash in the password, inspect", "redis://alice:Tr0ub4dor#3xyz@redis.internal:6379/0", []string{"inspect", "job-1"}, []string{"Tr0ub4dor", "3xyz", "alice"}, "-redis: " + hashed},
		{"hash in the password, release", "redis://alice:Tr0ub4dor#3xyz@redis.internal:6379/0", []string{"release", "job-1"}, []string{"Tr0ub4dor", "3xyz", "alice"}, "-redis: " + hashed},
		{"hash in a password of digits, check", "redis://:12345#x@127.0.0.1:6379/0", []string{"check"}, []string{"12345"}, "-redis: " + hashedDigits},
		{"hash in a password of digits, inspect", "redis://:12345#x@127.0.0.1:6379/0", []string{"inspect", "job-1"}, []string{"12345"}, "-redis: " + hashedDigits},
		{"hash in a password of digits, release", "redis://:12345#x@127.0.0.1:6379/0", []string{"release", "job-1"}, []string{"12345"}, "-redis: " + hashedDigits},
		{"one-letter user, slash in the password", "redis://u:S3CRET/pw@127.0.0.1:6379/0", []string{"check"}, []string{"S3CRET", "S3CRET/pw"},
			"its user info does not parse: percent-encode the reserved characters (such as / ? # @) in the user name and password"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, status := runCommand(t, c.url, c.args...)
			all := stdout + stderr
			for _, s := range append([]string{password}, c.secrets...) {
				require.NotContains(t, all, s, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			require.Contains(t, all, c.want)
			require.NotZero(t, status, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		})
	}
}

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://app:pw@host:6379/0":                         "redis://xxxxx@host:6379/0",
		"redis://pw@host:6379/0?db=1":                        "redis://xxxxx@host:6379/0?db=1",
		"redis://host:6379/0":                                "redis://host:6379/0",
		"redis://app:p/w@host:6379/0":                        "redis://xxxxx@host:6379/0",
		"redis://app:pw@host:port/0":                         "redis://xxxxx@host:port/0",
		"app:pw@host:6379":                                   "xxxxx@host:6379",
		"redis://alice:Tr0ub4dor#3xyz@redis.internal:6379/0": "redis://xxxxx@redis.internal:6379/0",
		"redis://:12345#x@127.0.0.1:6379/0":                  "redis://xxxxx@127.0.0.1:6379/0",
		"redis://:12345?x@127.0.0.1:6379/0":                  "redis://xxxxx@127.0.0.1:6379/0",
		// The last "@" may be in a password or in the query: all before it goes.
		"redis://app:pw@host:6379/0?a@b": "redis://xxxxx@b",
	} {
		require.Equal(t, want, redactURL(raw), raw)
	}
}

func TestNoMessageShowsThePostgresPassword(t *testing.T) {
	const password = "s3cr3t-pw"
	down := "127.0.0.1:" + closedPort(t)
	for _, c := range []struct {
		name, url string
		secrets   []string // besides password
		want      string   // in the output, so the case ran as meant
	}{
		{"in the user info", "postgres://app:" + password + "@" + down + "/test?sslmode=disable", nil, "connection refused"},
		{"as a parameter", "postgres://app@" + down + "/test?sslmode=disable&password=" + password, nil, "connection refused"},
		{"escaped, as a parameter", "postgresql://app@" + down + "/test?password=s3cr3t%21pw", []string{"s3cr3t!pw", "s3cr3t%21pw"}, "connection refused"},
		{"in key=value settings", "host=127.0.0.1 port=" + strings.TrimPrefix(down, "127.0.0.1:") + " user=app password=" + password + " dbname=test sslmode=disable", nil, "connection refused"},
		{"quoted in key=value settings", "host=127.0.0.1 port=" + strings.TrimPrefix(down, "127.0.0.1:") + " password='s3cr3t pw' dbname=test", []string{"s3cr3t pw"}, "connection refused"},
		{"escaped space in key=value settings", `host=127.0.0.1 password=S3C\ RETpw dbname=test sslmode=bogus`, []string{"S3C", "RETpw"}, "sslmode is invalid"},
		{"escaped quote in quoted key=value settings", `host=127.0.0.1 password='S3C\'RET pw' dbname=test sslmode=bogus`, []string{"S3C", "RET pw", "RET", "pw'"}, "sslmode is invalid"},
		{"quote left open in key=value settings", `host=127.0.0.1 password='S3C RET pw dbname=test`, []string{"S3C", "RET pw", "RET"}, "unterminated quoted string"},
		{"escaped space in key=value settings, server down", "host=127.0.0.1 port=" + strings.TrimPrefix(down, "127.0.0.1:") + ` password=S3C\ RETpw dbname=test sslmode=disable`, []string{"S3C", "RETpw"}, "connection refused"},
		{"bad port", "postgres://app:" + password + "@127.0.0.1:notaport/test", nil, "-postgres: "},
		{"a database that does not exist", "postgres://postgres:" + password + "@127.0.0.1:5432/nosuchdb?sslmode=disable", nil, "nosuchdb"},
		{"hash in the password", "postgres://alice:Tr0ub4dor#3xyz@db.internal:5432/test", []string{"Tr0ub4dor", "3xyz"}, `-postgres: "postgres://xxxxx@db.internal:5432/test" holds a '#'`},
	} {
		for _, cmd := range [][]string{{"check"}, {"list"}, {"inspect", "job-1"}, {"release", "job-1"}, {"forget", "-yes", "job-1"}} {
			t.Run(c.name+", "+cmd[0], func(t *testing.T) {
				for _, r := range []cliRun{
					runCLI(t, nil, nil, append([]string{"-postgres", c.url}, cmd...)...),
					runCLI(t, nil, []string{"DATABASE_URL=" + c.url}, cmd...),
				} {
					all := r.stdout + r.stderr
					for _, s := range append([]string{password}, c.secrets...) {
						require.NotContains(t, all, s, "%s", r)
					}
					requireOneErrorLine(t, r, c.want)
				}
			})
		}
	}
}

// A user name a parser reads as a host (here "u", before a '/' in the
// password) is taken out where it stands as a word, not inside other words;
// a piece of the password goes wherever it appears.
func TestAUserNameReadAsAHostIsTakenOutAsAWholeWordOnly(t *testing.T) {
	const raw = "redis://u:S3CRET/pw@127.0.0.1:6379/0"
	require.Equal(t, "dial tcp: lookup xxxxx: unknown user xxxxx, such as xxxxx_ or usxxxxx: xxxxx",
		redactText("dial tcp: lookup u: unknown user u, such as S3CRET_ or usS3CRET: u:S3CRET", raw))
	require.Equal(t, `parse "redis://xxxxx@127.0.0.1:6379/0": its user info does not parse`,
		redactText(`parse "`+raw+`": its user info does not parse`, raw))
}

func TestParameterPasswordsAreCredentials(t *testing.T) {
	for raw, want := range map[string][]string{
		"postgres://u@h/db?sslmode=disable&password=pw": {"pw"},
		"postgres://u@h/db?password=p%40w":              {"p%40w", "p@w"},
		"host=h password=pw user=u":                     {"pw"},
		"host=h password = 'p w' user=u":                {"p w"},
		`host=h password=p\ w user=u`:                   {`p\ w`, "p w"},
		`host=h password='p\'w' user=u`:                 {`p\'w`, "p'w"},
		"host=h user=u":                                 nil,
		"postgres://u@h/db":                             nil,
		"postgres://u:pw@h/db":                          {"u:pw", "pw"},
		"redis://pw@h:6379/0":                           {"pw"},
		"postgres://h/db?sslpassword=key&password=pw":   {"key", "pw"},
	} {
		require.Equal(t, want, credentials(raw), raw)
	}
}
