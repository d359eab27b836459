package netlab

import "testing"

func TestSendQueued(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      int64
		bad       bool
	}{
		{"none", "", 0, false},
		{"with state", "ESTAB      0      4194304 198.18.0.1:40000 198.18.0.2:5201\nFIN-WAIT-1 0      1048576 198.18.0.1:40002 198.18.0.2:5201\nCLOSE-WAIT 1 0 198.18.0.2:5201 198.18.0.1:39000\n", 5242880, false},
		{"one state", "0 2896 198.18.0.1:40000 198.18.0.2:5201\n0 0 [fd00::1]:1 [fd00::2]:2\n", 2896, false},
		{"garbage", "ESTAB x y a b\n", 0, true},
		{"short", "ESTAB\n", 0, true},
	} {
		got, err := sendQueued(c.out)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%s: sendQueued = %d, %v; want %d, error %v", c.name, got, err, c.want, c.bad)
		}
	}
}
