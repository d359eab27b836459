package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestEvalList(t *testing.T) {
	out, err := runCLI("eval", "--list")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"egress-200m", "egress-1g", "egress-high", "egress-two-cgroups", "incast"} {
		if !strings.Contains(out, name) {
			t.Errorf("--list lacks %s:\n%s", name, out)
		}
	}
}

// TestEvalUsageErrors: bad scenarios and flags are usage errors (exit 2)
// that name the file, line and field, found before anything is built.
func TestEvalUsageErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("name: x\nhosts: [a, b]\nlinks: [{name: l, hosts: [a, b]}]\nflows: [{kind: rpc, size: 10QB, from: a, to: b}]\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", bad}, "bad.yaml:4: flows[0].size: bad size \"10QB\""},
		{[]string{"eval", "nosuch"}, `unknown scenario "nosuch"`},
		{[]string{"eval", "--limiter", "cake", "egress-1g"}, `unknown limiter "cake"`},
	} {
		_, err := runCLI(c.args...)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
}
