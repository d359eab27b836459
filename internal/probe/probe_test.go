package probe

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

func fake() []Result {
	return []Result{
		{ID: "kernel", Name: "kernel", Level: Info, OK: true, Detail: "Linux 6.18"},
		{ID: "privileges", Name: "privileges", Level: Required, OK: true, Detail: "root (uid 0)"},
		{ID: "bpffs", Name: "bpffs", Level: Required, OK: false, Detail: "not mounted:\n  test mount failed", Hint: "mount -t bpf bpf /sys/fs/bpf"},
		{ID: "btf", Name: "kernel BTF", Level: Required, OK: false, Detail: "no /sys/kernel/btf/vmlinux"},
		{ID: "struct_ops", Name: "struct_ops TCP CC", Level: Optional, OK: false, Detail: "unsupported", Hint: "`hbm cc` unavailable"},
		{ID: "tcp_cc", Name: "TCP congestion control", Level: Info, OK: false, Detail: "unreadable"},
	}
}

func TestErr(t *testing.T) {
	if err := Err(nil); err != nil {
		t.Errorf("Err(nil) = %v", err)
	}
	rs := fake()
	err := Err(rs)
	if err == nil || err.Error() != "2 required features missing (bpffs, kernel BTF)" {
		t.Errorf("Err = %v", err)
	}
	if err := Err(rs[:3]); err == nil || err.Error() != "1 required feature missing (bpffs)" {
		t.Errorf("Err(one) = %v", err)
	}
	// Optional and informational failures never fail the check.
	if err := Err([]Result{rs[0], rs[1], rs[4], rs[5]}); err != nil {
		t.Errorf("Err(optional only) = %v", err)
	}
	req, opt := Counts(rs)
	if req != 2 || opt != 1 {
		t.Errorf("Counts = %d, %d; want 2, 1", req, opt)
	}
	if !rs[2].Missing() || rs[5].Missing() || rs[1].Missing() {
		t.Error("Missing: wrong for required / info / ok results")
	}
}

func TestMark(t *testing.T) {
	rs := fake()
	var got []string
	for _, r := range rs {
		got = append(got, Mark(r))
	}
	want := []string{"✓", "✓", "✗", "✗", "-", "-"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("marks = %q, want %q", got, want)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, fake()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// 6 results, 2 hints (failed ones with a hint), 1 summary.
	if len(lines) != 9 {
		t.Fatalf("got %d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{
		"✓ kernel                  info      Linux 6.18",
		"✗ bpffs                   required  not mounted: test mount failed",
		"hint: mount -t bpf bpf /sys/fs/bpf",
		"- struct_ops TCP CC       optional  unsupported",
		"hint: `hbm cc` unavailable",
		"✗ kernel BTF              required  no /sys/kernel/btf/vmlinux",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if last := lines[len(lines)-1]; last != "2 required features missing; 1 optional feature missing" {
		t.Errorf("summary = %q", last)
	}
	// Hints line up under the detail column.
	col := func(line, sub string) int { return utf8.RuneCountInString(line[:strings.Index(line, sub)]) }
	if i, j := col(lines[3], "hint:"), col(lines[2], "not mounted"); i != j {
		t.Errorf("hint at column %d, detail at %d:\n%s", i, j, out)
	}

	b.Reset()
	ok := []Result{{ID: "a", Name: "a", Level: Required, OK: true, Detail: "fine", Hint: "ignored when ok"}}
	if err := WriteTable(&b, ok); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "✓ a  required  fine\nall required features present\n" {
		t.Errorf("table = %q", got)
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, fake()); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if rep.OK || rep.RequiredMissing != 2 || rep.OptionalMissing != 1 || len(rep.Checks) != 6 {
		t.Errorf("report = %+v", rep)
	}
	if !reflect.DeepEqual(rep.Checks, fake()) {
		t.Errorf("checks do not round-trip:\n%+v\n%+v", rep.Checks, fake())
	}
	for _, key := range []string{`"id": "bpffs"`, `"level": "required"`, `"ok": false`, `"hint": "mount -t bpf bpf /sys/fs/bpf"`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"checks": []`) || !strings.Contains(b.String(), `"ok": true`) {
		t.Errorf("empty report = %s", b.String())
	}
}

func TestRunChecks(t *testing.T) {
	rs := RunChecks([]Check{
		{"ok", "ok", Required, func() (string, string, error) { return "found", "", nil }},
		{"bad", "bad", Required, func() (string, string, error) { return "at /x", "do y", errors.New("broken") }},
		{"perm", "perm", Required, func() (string, string, error) {
			return "", "needs Linux 9", &os.PathError{Op: "open", Path: "/x", Err: unix.EPERM}
		}},
		{"panic", "panic", Optional, func() (string, string, error) { panic("boom") }},
	})
	want := []Result{
		{ID: "ok", Name: "ok", Level: Required, OK: true, Detail: "found"},
		{ID: "bad", Name: "bad", Level: Required, Detail: "at /x: broken", Hint: "do y"},
		{ID: "perm", Name: "perm", Level: Required, Detail: "cannot probe without privileges: open /x: operation not permitted", Hint: "run hbm check as root"},
		{ID: "panic", Name: "panic", Level: Optional, Detail: "probe panicked: boom"},
	}
	if !reflect.DeepEqual(rs, want) {
		t.Errorf("got  %+v\nwant %+v", rs, want)
	}
}

func TestChecksUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Checks() {
		if seen[c.ID] || c.ID == "" || c.Name == "" || c.Run == nil {
			t.Errorf("bad or duplicate check %+v", c)
		}
		seen[c.ID] = true
	}
}

func TestParseCapEff(t *testing.T) {
	status := "Name:\thbm\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n"
	eff, err := parseCapEff(status)
	if err != nil || eff != 0x1ffffffffff {
		t.Fatalf("parseCapEff = %#x, %v", eff, err)
	}
	if _, err := parseCapEff("Name: x\n"); err == nil {
		t.Error("no CapEff: want an error")
	}
}

func TestMissingCaps(t *testing.T) {
	all := uint64(1)<<capBPF | 1<<capNetAdmin | 1<<capSysAdmin
	for _, tc := range []struct {
		eff     uint64
		lastCap int
		want    []string
	}{
		{all, 40, nil},
		{0, 40, []string{"CAP_BPF", "CAP_NET_ADMIN", "CAP_SYS_ADMIN"}},
		{1<<capNetAdmin | 1<<capSysAdmin, 40, []string{"CAP_BPF"}},
		{1<<capNetAdmin | 1<<capSysAdmin, 37, nil}, // before CAP_BPF existed
		{1<<capNetAdmin | 1<<capSysAdmin, -1, []string{"CAP_BPF"}},
		{1 << capBPF, 40, []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}},
	} {
		if got := missingCaps(tc.eff, tc.lastCap); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("missingCaps(%#x, %d) = %q, want %q", tc.eff, tc.lastCap, got, tc.want)
		}
	}
}

func TestFindMount(t *testing.T) {
	const mi = `22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
40 22 0:33 / /sys/fs/bpf ro,relatime shared:12 - bpf bpf ro,mode=700
41 40 0:34 / /sys/fs/bpf rw,relatime - bpf bpf rw
50 1 0:40 / /mnt/my\040dir rw - tmpfs tmpfs rw
`
	m, ok, err := findMount(strings.NewReader(mi), "/sys/fs/bpf")
	if err != nil || !ok || m.fstype != "bpf" || m.readOnly {
		t.Errorf("stacked bpffs: %+v %v %v (want the top, rw mount)", m, ok, err)
	}
	m, ok, _ = findMount(strings.NewReader(mi[:strings.Index(mi, "41 40")]), "/sys/fs/bpf")
	if !ok || !m.readOnly {
		t.Errorf("ro bpffs: %+v %v", m, ok)
	}
	if m, ok, _ := findMount(strings.NewReader(mi), "/mnt/my dir"); !ok || m.fstype != "tmpfs" {
		t.Errorf("escaped mount point: %+v %v", m, ok)
	}
	if _, ok, _ := findMount(strings.NewReader(mi), "/sys/fs"); ok {
		t.Error("/sys/fs is not a mount point")
	}
}

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{
		`/a`:          "/a",
		`/a\040b`:     "/a b",
		`/a\040`:      "/a ",
		`/a\134b`:     `/a\b`,
		`/a\04`:       `/a\04`,
		`/a\999\011x`: "/a\\999\tx",
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFilesystemSupported(t *testing.T) {
	p := filepath.Join(t.TempDir(), "filesystems")
	if err := os.WriteFile(p, []byte("nodev\tsysfs\nnodev\tbpf\n\text4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !filesystemSupported(p, "bpf") || !filesystemSupported(p, "ext4") || filesystemSupported(p, "cgroup2") {
		t.Error("filesystemSupported wrong")
	}
	if filesystemSupported(filepath.Join(t.TempDir(), "none"), "bpf") {
		t.Error("missing file: want false")
	}
}

func TestKernelConfigValue(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.gz")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte("CONFIG_TCP_CONG_CUBIC=y\n# CONFIG_TCP_CONG_DCTCP_X is not set\nCONFIG_TCP_CONG_DCTCP=m\n"))
	zw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := kernelConfigValue(p, "CONFIG_TCP_CONG_DCTCP"); got != "m" {
		t.Errorf("DCTCP = %q", got)
	}
	if got := kernelConfigValue(p, "CONFIG_TCP_CONG_BBR"); got != "" {
		t.Errorf("BBR = %q", got)
	}
	if got := kernelConfigValue(filepath.Join(t.TempDir(), "none"), "CONFIG_X"); got != "" {
		t.Errorf("missing file = %q", got)
	}
}

func TestDescribeCC(t *testing.T) {
	for _, tc := range []struct {
		avail     []string
		cur, cfg  string
		hbm       bool
		wantParts []string
	}{
		{[]string{"reno", "cubic", "dctcp"}, "cubic", "y", false, []string{"reno cubic dctcp (default cubic)", "dctcp native"}},
		{[]string{"reno", "cubic", "bbr"}, "bbr", "", false, []string{"(default bbr)", "no native dctcp"}},
		{[]string{"reno", "cubic"}, "", "m", false, []string{"modprobe tcp_dctcp"}},
		{[]string{"reno", "cubic", "dctcp"}, "cubic", "", true, []string{"HBM's BPF one"}},
		{[]string{"reno", "cubic", "dctcp"}, "cubic", "", false, []string{"not native"}},
	} {
		got := describeCC(tc.avail, tc.cur, tc.cfg, tc.hbm)
		for _, p := range tc.wantParts {
			if !strings.Contains(got, p) {
				t.Errorf("describeCC(%v, %q, %q) = %q, lacks %q", tc.avail, tc.cur, tc.cfg, got, p)
			}
		}
	}
	if got := describeECN("2"); !strings.Contains(got, "tcp_ecn=2") {
		t.Errorf("describeECN = %q", got)
	}
}
