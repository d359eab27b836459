package eval

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// NewOutDir creates a fresh output directory in parent ("" for $TMPDIR)
// named prefix-YYYYMMDD-HHMMSS-RANDOM (os.MkdirTemp: created, never
// reused, so nothing someone else placed there beforehand is written
// through).
func NewOutDir(parent, prefix string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	dir, err := os.MkdirTemp(parent, prefix+"-"+time.Now().Format("20060102-150405")+"-")
	if err != nil {
		return "", fmt.Errorf("output directory: %w", err)
	}
	return dir, nil
}

// mkdirNoFollow creates directory path (and its missing parents, as
// WriteFiles makes the output directory), or accepts an existing one that is
// a real directory: never a symbolic link placed there by someone else.
func mkdirNoFollow(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	err := os.Mkdir(path, 0o755)
	if err == nil || !errors.Is(err, os.ErrExist) {
		return err
	}
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory (a symbolic link is not followed)", path)
	}
	return nil
}

// writeFileNoFollow writes dir/name through a fresh temporary file renamed
// over it: a symbolic link at dir/name is replaced, never followed.
func writeFileNoFollow(dir, name string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	werr := write(f)
	if err := f.Chmod(0o644); werr == nil {
		werr = err
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(tmp, filepath.Join(dir, name))
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", name, werr)
	}
	return nil
}

// MkdirNoFollow and WriteFileNoFollow are the same for other commands'
// output directories (hbm analyze --out).
func MkdirNoFollow(path string) error { return mkdirNoFollow(path) }

// WriteFileNoFollow writes dir/name through a temporary file renamed over
// it (see writeFileNoFollow).
func WriteFileNoFollow(dir, name string, write func(io.Writer) error) error {
	return writeFileNoFollow(dir, name, write)
}
