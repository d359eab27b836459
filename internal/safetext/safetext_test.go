package safetext

import (
	"strconv"
	"testing"
	"unicode/utf8"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/workload/batch", "/workload/batch"},
		{"/system.slice/nginx.service", "/system.slice/nginx.service"},
		{"/a b/c-d_e:f@g", "/a b/c-d_e:f@g"},
		{"/pods/café/日本", "/pods/café/日本"},
		{"", ""},
		{"/d/\x1b[2J\x1b[Hroot", `"/d/\x1b[2J\x1b[Hroot"`},
		{"/d/a\rb", `"/d/a\rb"`},
		{"/d/a\nb", `"/d/a\nb"`},
		{"/d/a\tb", `"/d/a\tb"`},
		{"/d/\x7f", `"/d/\x7f"`},
		{"/d/\xff\xfe", `"/d/\xff\xfe"`},
		{"/d/\u202egnp.exe", `"/d/\u202egnp.exe"`}, // right-to-left override
		{"/d/\u00a0", `"/d/\u00a0"`},               // no-break space
		{"/d/\u009b2J", `"/d/\u009b2J"`},           // C1 CSI
		{`"/d/x"`, `"\"/d/x\""`},                   // looks quoted: quoted again
		{`/d/"x"\y`, `/d/"x"\y`},
	} {
		got := Quote(c.in)
		if got != c.want {
			t.Errorf("Quote(%q) = %s, want %s", c.in, got, c.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Quote(%q) = %q: invalid UTF-8", c.in, got)
		}
		for _, b := range []byte(got) {
			if b < 0x20 || b == 0x7f {
				t.Errorf("Quote(%q) = %q: control byte %#x", c.in, got, b)
			}
		}
		if got != c.in {
			if back, err := strconv.Unquote(got); err != nil || back != c.in {
				t.Errorf("Unquote(Quote(%q)) = %q, %v", c.in, back, err)
			}
		}
	}
}
