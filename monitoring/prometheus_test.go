package monitoring_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobonce/jobonce/internal/testenv"
)

// rulesFile is the rules file the tests prove.
const rulesFile = "prometheus/jobonce.rules.yml"

// tool returns the path of a Prometheus binary (prometheus, promtool),
// failing the test when it is missing; it skips under -short.
func tool(t *testing.T, name string) string {
	t.Helper()
	testenv.Short(t)
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed for this test (Debian's prometheus package; scripts/test.sh installs it): %v", name, err)
	}
	return path
}

// prometheus is a Prometheus server of the test's own, on a loopback port,
// with a data directory of its own; it is killed at the end of the test.
type prometheus struct {
	url string
	log string
}

// startPrometheus starts Prometheus scraping target (host:port) and
// evaluating rules every interval, and waits until it is ready.
func startPrometheus(t *testing.T, target, rules string, interval time.Duration) *prometheus {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	writeFile(t, config, fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files:
  - %[2]q
scrape_configs:
  - job_name: worker
    static_configs:
      - targets: [%[3]q]
`, interval, rules, target))
	var lastErr error
	for range 5 { // a free port can be taken between choosing and listening
		port := freePort(t)
		p := &prometheus{url: "http://127.0.0.1:" + strconv.Itoa(port), log: filepath.Join(dir, "prometheus.log")}
		logFile, err := os.Create(p.log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--log.level=warn")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatalf("start prometheus: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); _ = logFile.Close(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("prometheus log:\n%s", tail(p.log, 30))
			}
		})
		if lastErr = p.waitReady(exited); lastErr == nil {
			return p
		}
	}
	t.Fatalf("prometheus did not start: %v", lastErr)
	return nil
}

// waitReady waits until Prometheus answers /-/ready, or exited is closed.
func (p *prometheus) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("it exited:\n%s", tail(p.log, 10))
		default:
		}
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready within 30s:\n%s", tail(p.log, 10))
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// query evaluates an instant query now.
func (p *prometheus) query(t *testing.T, q string) []sample {
	t.Helper()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(q), &body)
	if body.Status != "success" {
		t.Fatalf("query %s: %s", q, body.Error)
	}
	out := make([]sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			v = math.NaN()
		}
		out = append(out, sample{Metric: r.Metric, Value: v})
	}
	return out
}

// alert is one active alert.
type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
	Value  string            `json:"value"`
}

// alerts returns the active alerts: pending and firing.
func (p *prometheus) alerts(t *testing.T) []alert {
	t.Helper()
	var body struct {
		Data struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	p.get(t, "/api/v1/alerts", &body)
	return body.Data.Alerts
}

// firing returns the firing alerts named name whose labels include match.
func (p *prometheus) firing(t *testing.T, name string, match map[string]string) []alert {
	t.Helper()
	var out []alert
	for _, a := range p.alerts(t) {
		if a.Labels["alertname"] != name || a.State != "firing" {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
}

// waitFiring waits until an alert named name, with labels including
// match, fires, and returns it.
func (p *prometheus) waitFiring(t *testing.T, name string, match map[string]string) alert {
	t.Helper()
	var found []alert
	until(t, "alert "+name+" fires", 90*time.Second, func() bool {
		found = p.firing(t, name, match)
		return len(found) > 0
	})
	t.Logf("%s fires: %v (value %s)", name, found[0].Labels, found[0].Value)
	return found[0]
}

func (p *prometheus) get(t *testing.T, path string, into any) {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
}

// until polls cond until it holds, failing the test after within.
func until(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shortFor returns rules with every alert's for: duration replaced by d,
// so that an alert fires within the test's time.
func shortFor(rules string, d time.Duration) string {
	return regexp.MustCompile(`(?m)^(\s+for:\s*)\S+$`).ReplaceAllString(rules, "${1}"+d.String())
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
