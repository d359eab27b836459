package dataplane

import "testing"

// verifierBudget is the share of the verifier's limit a program may take:
// a policer near the limit fails to load after the next small change, and
// takes tens of seconds to load on a busy node (docs/design.md, "What the
// verifier checks": 913,000 of 1,000,000 before police_walk).
const verifierBudget = 0.75

// TestVerifierHeadroom: every program loads on this kernel, and none takes
// more than verifierBudget of the verifier's instruction limit.
func TestVerifierHeadroom(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs BPF")
	}
	vs, err := Verify()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 5 {
		t.Fatalf("Verify reported %d programs, want 5", len(vs))
	}
	for _, v := range vs {
		if v.Instructions == 0 {
			t.Errorf("%s: the kernel did not report the verified instructions", v.Name)
			continue
		}
		t.Logf("%s: %d instructions verified (%.0f%% of the limit)", v.Name, v.Instructions, 100*float64(v.Instructions)/VerifierLimit)
		if float64(v.Instructions) > verifierBudget*VerifierLimit {
			t.Errorf("%s: the verifier processed %d instructions, over %.0f%% of its limit of %d: the next change may not load",
				v.Name, v.Instructions, 100*verifierBudget, VerifierLimit)
		}
	}
}
