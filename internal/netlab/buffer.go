package netlab

import (
	"bytes"
	"strings"
	"sync"
)

// maxBuffer caps what a Buffer keeps: a chatty process cannot fill memory.
const maxBuffer = 1 << 20

// Buffer collects a process's output, safe for a writer and readers at
// once. It keeps the first maxBuffer bytes and drops the rest (noting so).
type Buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	dropped int
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if room := maxBuffer - s.b.Len(); room < len(p) {
		s.b.Write(p[:max(room, 0)])
		s.dropped += len(p) - max(room, 0)
		return len(p), nil
	}
	return s.b.Write(p)
}

// String returns what was kept.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped > 0 {
		return s.b.String() + "\n[... " + itoa(s.dropped) + " bytes dropped]"
	}
	return s.b.String()
}

// Bytes returns a copy of what was kept.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

// LastLine is the last non-empty line kept (an error message, usually).
func (s *Buffer) LastLine() string {
	t := strings.TrimSpace(s.String())
	if i := strings.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	return t
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// lineWatcher closes seen when a line starting with prefix is written.
type lineWatcher struct {
	prefix string
	seen   chan struct{}
	mu     sync.Mutex
	buf    []byte
	done   bool
}

func newLineWatcher(prefix string) *lineWatcher {
	return &lineWatcher{prefix: prefix, seen: make(chan struct{})}
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if strings.HasPrefix(line, w.prefix) {
			w.done = true
			w.buf = nil
			close(w.seen)
			break
		}
	}
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[len(w.buf)-4096:]
	}
	return len(p), nil
}
