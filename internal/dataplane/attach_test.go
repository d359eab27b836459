package dataplane

import "testing"

// TestParsePolicingLink: only a policing link's name, <id>-<direction>, is
// read as one; assist links and strangers are not.
func TestParsePolicingLink(t *testing.T) {
	for _, c := range []struct {
		name string
		id   uint64
		d    Direction
		ok   bool
	}{
		{"1234-egress", 1234, Egress, true},
		{"1234-ingress", 1234, Ingress, true},
		{"1234-egress-sockops", 0, 0, false},
		{"1234-ingress-sockops", 0, 0, false},
		{"0-egress", 0, 0, false},
		{"x-egress", 0, 0, false},
		{"1234-sideways", 0, 0, false},
		{"1234", 0, 0, false},
		{"", 0, 0, false},
	} {
		id, d, ok := parsePolicingLink(c.name)
		if id != c.id || d != c.d || ok != c.ok {
			t.Errorf("parsePolicingLink(%q) = %d, %v, %v; want %d, %v, %v", c.name, id, d, ok, c.id, c.d, c.ok)
		}
	}
}
