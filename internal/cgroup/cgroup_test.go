package cgroup

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/testutil"
)

func TestParseMountinfo(t *testing.T) {
	const info = `24 29 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
41 35 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
42 35 0:39 / /sys/fs/cgroup/cpu rw shared:11 - cgroup cgroup rw,cpu
`
	got, err := parseMountinfo(strings.NewReader(info))
	if err != nil || got != "/sys/fs/cgroup/unified" {
		t.Fatalf("parseMountinfo = %q, %v; want /sys/fs/cgroup/unified", got, err)
	}
	_, err = parseMountinfo(strings.NewReader("24 29 0:22 / /sys rw - sysfs sysfs rw\n"))
	if err != ErrNoCgroup2 {
		t.Fatalf("no cgroup2: err = %v, want ErrNoCgroup2", err)
	}
	got, _ = parseMountinfo(strings.NewReader(`1 2 0:3 / /mnt/my\040cg rw - cgroup2 none rw` + "\n"))
	if got != "/mnt/my cg" {
		t.Fatalf("escaped mount point = %q", got)
	}
}

func TestResolve(t *testing.T) {
	mnt, err := Mount()
	if err != nil {
		testutil.Missing(t, "cgroup2 mount", err)
	}
	root, err := Resolve("/")
	if err != nil || root.Rel != "/" || root.Dir != mnt || root.ID == 0 {
		t.Fatalf("Resolve(/) = %+v, %v", root, err)
	}
	// Only "/" names the root group: an unset shell variable must not
	// limit the whole host.
	for _, p := range []string{"", ".", "./", "//", "a/..", "/a/../", mnt, mnt + "/", mnt + "/."} {
		if g, err := Resolve(p); !errors.Is(err, ErrRootSpelling) {
			t.Errorf("Resolve(%q) = %+v, %v; want ErrRootSpelling", p, g, err)
		}
	}
	if _, err := Resolve("/no/such/group-hbm-test"); err == nil || !strings.Contains(err.Error(), "not a cgroup v2 group") {
		t.Fatalf("missing group: err = %v", err)
	}
	if _, err := Resolve(mnt + "/cgroup.procs"); err == nil {
		t.Fatal("a file resolved as a group")
	}
	if _, err := Resolve("/proc"); err == nil {
		t.Fatal("/proc resolved as a group")
	}
}

func TestCreatePathOfRemove(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := Mount(); err != nil {
		testutil.Missing(t, "cgroup2 mount", err)
	}
	const rel = "/hbm-test-cgroup/child"
	Remove("/hbm-test-cgroup") // leftovers of a crashed run
	g, err := Create(rel)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove("/hbm-test-cgroup")
	if g.Rel != rel {
		t.Fatalf("Rel = %q, want %q", g.Rel, rel)
	}
	back, err := PathOf(g.ID)
	if err != nil || back.Rel != rel {
		t.Fatalf("PathOf(%d) = %+v, %v", g.ID, back, err)
	}
	if err := Remove("/hbm-test-cgroup"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Dir); !os.IsNotExist(err) {
		t.Fatalf("group still there: %v", err)
	}
	if _, err := PathOf(g.ID); !errors.Is(err, ErrRemoved) && !errors.Is(err, unix.ESTALE) {
		t.Fatalf("PathOf of a removed group: %v; want ErrRemoved or ESTALE (gone for certain)", err)
	}
}

// TestLevel: the level the kernel gives a group (root 0) is its depth below
// the mount when the mount is the real root.
func TestLevel(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := Mount(); err != nil {
		testutil.Missing(t, "cgroup2", err)
	}
	rel := "/hbm-test-level/a/b"
	g, err := Create(rel)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove("/hbm-test-level")
	lvl, err := Level(g)
	if err != nil {
		t.Fatal(err)
	}
	if lvl != 3 {
		t.Errorf("Level(%s) = %d, want 3", rel, lvl)
	}
}
