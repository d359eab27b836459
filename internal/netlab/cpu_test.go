package netlab

import "testing"

func TestStatCPU(t *testing.T) {
	for _, tc := range []struct {
		stat, prefix string
		want         uint64
		ok           bool
	}{
		{"14 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 120 345 0 0 20 0 1 0 3 0 0", "ksoftirqd/", 465, true},
		// A name with spaces and a parenthesis: fields counted after the last ')'.
		{"99 (a) b (ksoftirqd/1) R 1 1 1 0 -1 0 0 0 0 0 7 8 0 0 20 0 1 0 5 0 0", "a) b", 15, true},
		{"15 (kworker/0:1) I 2 0 0 0 -1 69238880 0 0 0 0 5 6 0 0 20 0 1 0 3 0 0", "ksoftirqd/", 0, false},
		{"16 (ksoftirqd/2) S 2 0", "ksoftirqd/", 0, false}, // cut short
		{"garbage", "ksoftirqd/", 0, false},
	} {
		got, ok := statCPU(tc.stat, tc.prefix)
		if got != tc.want || ok != tc.ok {
			t.Errorf("statCPU(%q, %q) = %d, %v; want %d, %v", tc.stat, tc.prefix, got, ok, tc.want, tc.ok)
		}
	}
}
