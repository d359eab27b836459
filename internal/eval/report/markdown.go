package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// mdCell keeps a cell on its line and in its column: scenario names, reasons
// and errors come from users and from the system.
var mdCell = strings.NewReplacer("|", `\|`, "\r\n", " ", "\n", " ", "\r", " ", "<", "&lt;", ">", "&gt;")

// WriteMarkdown writes report.md: the machine and invocation, then per
// scenario a table of throughput, one of RPC latency and one of loss and
// cost, the skipped and failed runs with their reasons, and the diagnoses.
func WriteMarkdown(w io.Writer, r *result.Results) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "# hbm eval report\n\n")
	mdTable(b, table{Header: []string{"", ""}, Rows: kvRows(metaRows(&r.Meta))})
	if sys := sysctlRows(&r.Meta); len(sys) > 0 {
		fmt.Fprintf(b, "<details><summary>sysctls (%d)</summary>\n\n", len(sys))
		mdTable(b, table{Header: []string{"sysctl", "value"}, Rows: kvRows(sys)})
		fmt.Fprintf(b, "</details>\n\n")
	}
	all := scenarios(r)
	if len(all) == 0 {
		fmt.Fprintf(b, "No runs.\n")
	}
	for _, s := range all {
		fmt.Fprintf(b, "## %s\n\n", mdCell.Replace(s.Name))
		if len(s.Done) == 0 {
			fmt.Fprintf(b, "No completed runs.\n\n")
		}
		for _, t := range s.tables() {
			fmt.Fprintf(b, "### %s\n\n", t.Title)
			mdTable(b, t)
		}
		mdList(b, "Skipped and failed runs", s.notDone())
		mdList(b, "Diagnoses", s.diagnoses())
	}
	return b.Flush()
}

func kvRows(kvs []kv) [][]string {
	rows := make([][]string, len(kvs))
	for i, x := range kvs {
		rows[i] = []string{x.K, x.V}
	}
	return rows
}

func mdTable(w io.Writer, t table) {
	line := func(cells []string) {
		for i := range cells {
			cells[i] = mdCell.Replace(cells[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	line(append([]string(nil), t.Header...))
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
		if t.IsNum(i) {
			sep[i] = "---:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, row := range t.Rows {
		line(append([]string(nil), row...))
	}
	fmt.Fprintln(w)
}

func mdList(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "### %s\n\n", title)
	for _, it := range items {
		fmt.Fprintf(w, "- %s\n", mdCell.Replace(it))
	}
	fmt.Fprintln(w)
}
