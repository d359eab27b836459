package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/dataplane"
)

// The Grafana dashboard shipped in deploy/grafana.
var dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "hbm-dashboard.json")

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// TestDashboard loads the dashboard and checks every query against what
// the collector exports: each metric name exists, and each label it groups
// or filters by is one the series carry.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string      `json:"uid"`
		Title      string      `json:"title"`
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: uid %q title %q, %d panels", dashboardPath, d.UID, d.Title, len(d.Panels))
	}

	// What the collector exports: names and label names of a scrape.
	out := scrape(t, func() ([]dataplane.Entry, error) { return entries(), nil })
	names := map[string]bool{}
	labels := map[string]bool{"instance": true, "job": true, "le": true} // added by Prometheus
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? `)
	labelName := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for _, line := range strings.Split(out, "\n") {
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names[m[1]] = true
		for _, l := range labelName.FindAllStringSubmatch(m[3], -1) {
			labels[l[1]] = true
		}
	}

	var exprs []string
	ids := map[int]bool{}
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q: datasource not the dashboard's ${datasource} variable", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, s)
			}
		}
	}

	metricRef := regexp.MustCompile(`\b((?:hbm|process)_[a-z0-9_]+)\b`)
	byLabels := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	matcher := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	labelValues := regexp.MustCompile(`label_values\(\s*[a-z_]+\s*,\s*([a-z_]+)\s*\)`)
	used := map[string]bool{}
	for _, e := range exprs {
		refs := metricRef.FindAllStringSubmatch(e, -1)
		if len(refs) == 0 {
			t.Errorf("query %q uses no hbm metric", e)
		}
		for _, r := range refs {
			used[r[1]] = true
			if !names[r[1]] {
				t.Errorf("query %q: metric %s is not in the collector's output", e, r[1])
			}
		}
		var ls []string
		for _, m := range byLabels.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[1], ",") {
				ls = append(ls, strings.TrimSpace(l))
			}
		}
		for _, m := range matcher.FindAllStringSubmatch(e, -1) {
			ls = append(ls, m[1])
		}
		for _, m := range labelValues.FindAllStringSubmatch(e, -1) {
			ls = append(ls, m[1])
		}
		for _, l := range ls {
			if l != "" && !labels[l] {
				t.Errorf("query %q: label %q is on no series", e, l)
			}
		}
	}
	// Every group counter is on the dashboard.
	for _, n := range []string{"hbm_group_bytes_total", "hbm_group_packets_total", "hbm_group_ce_marked_packets_total",
		"hbm_group_cwr_packets_total", "hbm_group_dropped_packets_total", "hbm_group_dropped_bytes_total", "hbm_group_limit_bytes_per_second"} {
		if !used[n] {
			t.Errorf("dashboard does not show %s", n)
		}
	}
	var all []string
	for n := range used {
		all = append(all, n)
	}
	slices.Sort(all)
	t.Logf("%d queries over %d metrics: %s", len(exprs), len(all), strings.Join(all, " "))
}
