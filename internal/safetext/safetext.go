// Package safetext makes names hbm does not choose (cgroup paths: the owner
// of a delegated subtree picks its directory names) safe to print on a
// terminal, in a log line or as a Prometheus label value.
package safetext

import (
	"strconv"
	"unicode/utf8"
)

// Quote returns s unchanged when it is valid UTF-8 made only of printable
// characters (strconv.IsPrint: letters, marks, numbers, punctuation, symbols
// and the ASCII space) and does not begin with a double quote; otherwise
// strconv.Quote(s): in double quotes, with Go escapes for control bytes
// ("\x1b", "\r", "\t"), other unprintable runes ("\u202e") and invalid
// UTF-8 ("\xff"). The result never holds a control byte or invalid UTF-8,
// ordinary paths print as they are, and a quoted name cannot be mistaken for
// an unquoted one (strconv.Unquote gives the exact bytes back).
func Quote(s string) string {
	if Plain(s) {
		return s
	}
	return strconv.Quote(s)
}

// Plain reports whether Quote leaves s as it is.
func Plain(s string) bool {
	if s != "" && s[0] == '"' {
		return false
	}
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !strconv.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}
