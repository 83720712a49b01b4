package monitoring_test

import (
	"os/exec"
	"testing"
)

// TestRulesPassPromtool: the rules file is valid, and each alert's unit
// tests (prometheus/jobonce.rules_test.yml) pass.
func TestRulesPassPromtool(t *testing.T) {
	promtool := tool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "jobonce.rules.yml"},
		{"test", "rules", "jobonce.rules_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
		t.Logf("promtool %v:\n%s", args, out)
	}
}
