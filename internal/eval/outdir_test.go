package eval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hbm-dev/hbm/internal/eval/result"
)

// Output files replace a symbolic link planted at their name instead of
// writing through it; a planted link is no captures directory.
func TestOutputNoFollow(t *testing.T) {
	dir, victim := t.TempDir(), filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"results.json", "report.md", "report.html"} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFiles(dir, &result.Results{Version: result.Version}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Errorf("written through a symbolic link: victim now %.40q", b)
	}
	for _, name := range []string{"results.json", "report.md", "report.html"} {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			t.Errorf("%s: %v, %v", name, st, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	link := filepath.Join(dir, "captures")
	os.Symlink(t.TempDir(), link)
	if err := mkdirNoFollow(link); err == nil {
		t.Error("mkdirNoFollow accepted a symbolic link")
	}
	if err := mkdirNoFollow(filepath.Join(dir, "real")); err != nil {
		t.Error(err)
	}
	if err := mkdirNoFollow(filepath.Join(dir, "real")); err != nil {
		t.Errorf("an existing directory: %v", err)
	}
	// --out names a directory that does not exist yet: the captures go in
	// before the reports are written (a run with --capture --out NEW lost
	// every capture).
	if err := mkdirNoFollow(filepath.Join(dir, "new", "captures")); err != nil {
		t.Errorf("missing parent: %v", err)
	}
}

func TestNewOutDir(t *testing.T) {
	parent := t.TempDir()
	a, err := NewOutDir(parent, "hbm-eval")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewOutDir(parent, "hbm-eval")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !strings.HasPrefix(filepath.Base(a), "hbm-eval-20") {
		t.Errorf("dirs %s and %s: want two fresh hbm-eval-DATE-* directories", a, b)
	}
}
