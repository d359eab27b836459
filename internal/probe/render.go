package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Mark is the table's first column: ✓ present, ✗ required and missing,
// - optional and missing (or an informational line that could not be read).
func Mark(r Result) string {
	switch {
	case r.OK:
		return "✓"
	case r.Level == Required:
		return "✗"
	default:
		return "-"
	}
}

// WriteTable writes the human-readable report: one line per check with its
// mark, name, level and detail, a hint line under missing features, and a
// summary line.
func WriteTable(w io.Writer, results []Result) error {
	nameW := 0
	for _, r := range results {
		nameW = max(nameW, utf8.RuneCountInString(r.Name))
	}
	var b strings.Builder
	for _, r := range results {
		pad := strings.Repeat(" ", nameW-utf8.RuneCountInString(r.Name))
		fmt.Fprintf(&b, "%s %s%s  %-8s  %s\n", Mark(r), r.Name, pad, r.Level, oneLine(r.Detail))
		if r.Hint != "" && !r.OK {
			fmt.Fprintf(&b, "  %s  %-8s  hint: %s\n", strings.Repeat(" ", nameW), "", oneLine(r.Hint))
		}
	}
	b.WriteString(Summary(results))
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary is the last line of the table.
func Summary(results []Result) string {
	req, opt := Counts(results)
	var s string
	if req == 0 {
		s = "all required features present"
	} else {
		s = plural(req, "required feature") + " missing"
	}
	if opt > 0 {
		s += "; " + plural(opt, "optional feature") + " missing"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Report is the --json document.
type Report struct {
	OK              bool     `json:"ok"` // every required check passed
	RequiredMissing int      `json:"required_missing"`
	OptionalMissing int      `json:"optional_missing"`
	Checks          []Result `json:"checks"`
}

// NewReport summarises results.
func NewReport(results []Result) Report {
	req, opt := Counts(results)
	if results == nil {
		results = []Result{}
	}
	return Report{OK: req == 0, RequiredMissing: req, OptionalMissing: opt, Checks: results}
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(NewReport(results))
}

// oneLine keeps a multi-line detail (a verifier log, say) on one table line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
