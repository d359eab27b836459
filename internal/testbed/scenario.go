package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hbm-dev/hbm/internal/workload"
)

// ServerPort is the port the workload server listens on in the receiver.
const ServerPort = 5201

// SetECN turns ECN on (net.ipv4.tcp_ecn=1: request and accept) or back to
// the kernel default (2: accept only) in both namespaces.
func (tb *Testbed) SetECN(on bool) error {
	v := "2"
	if on {
		v = "1"
	}
	return tb.SysctlBoth("net.ipv4.tcp_ecn", v)
}

// StartServer starts `bin workload serve` in the receiver namespace,
// listening on port on every address (IPv4 and IPv6), and waits at most 10s
// for it to listen.
func (tb *Testbed) StartServer(bin string, port int) (*Proc, error) {
	p := tb.Command(tb.ReceiverNS, "", bin, "workload", "serve", "--listen", "[::]:"+strconv.Itoa(port))
	w := &lineWatcher{prefix: "listening", seen: make(chan struct{})}
	var stderr syncBuffer
	p.Cmd.Stdout, p.Cmd.Stderr = w, &stderr
	if err := p.Start(); err != nil {
		return nil, err
	}
	select {
	case <-w.seen:
		return p, nil
	case <-p.Done():
		return nil, fmt.Errorf("testbed: workload server exited: %v: %s", p.Wait(), strings.TrimSpace(stderr.String()))
	case <-time.After(10 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("testbed: workload server not listening after 10s: %s", strings.TrimSpace(stderr.String()))
	}
}

// ClientArgs returns the `hbm workload run` arguments for cfg.
func ClientArgs(cfg workload.Config) []string {
	a := []string{"workload", "run", "--connect", cfg.Addr,
		"--streams", strconv.Itoa(cfg.Streams), "--rpc", strconv.Itoa(cfg.RPCs),
		"--duration", cfg.Duration.String(), "--warmup", cfg.Warmup.String(), "--json"}
	if cfg.RPCSize > 0 {
		a = append(a, "--rpc-size", strconv.Itoa(cfg.RPCSize))
	}
	if cfg.ReplySize > 0 {
		a = append(a, "--reply-size", strconv.Itoa(cfg.ReplySize))
	}
	if cfg.CC != "" {
		a = append(a, "--cc", cfg.CC)
	}
	return a
}

// RunClient runs `bin workload run --json` in the sender namespace inside
// the cgroup at cgroupDir and returns its result. It is bounded by the run's
// warm-up and duration plus 30s.
func (tb *Testbed) RunClient(ctx context.Context, bin, cgroupDir string, cfg workload.Config) (*workload.Result, error) {
	return tb.runClient(ctx, tb.SenderNS, cgroupDir, bin, cfg)
}

// runClient runs `bin workload run --json` in namespace ns (inside the
// cgroup at cgroupDir unless it is "") and returns its result, bounded by
// the run's warm-up and duration plus 30s.
func (tb *Testbed) runClient(ctx context.Context, ns, cgroupDir, bin string, cfg workload.Config) (*workload.Result, error) {
	p := tb.Command(ns, cgroupDir, bin, ClientArgs(cfg)...)
	var stdout, stderr syncBuffer
	p.Cmd.Stdout, p.Cmd.Stderr = &stdout, &stderr
	if err := p.Start(); err != nil {
		return nil, err
	}
	limit := cfg.Warmup + cfg.Duration + 30*time.Second
	var err error
	select {
	case <-p.Done():
		err = p.Wait()
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	case <-time.After(limit):
		p.Kill()
		err = fmt.Errorf("still running after %v: killed", limit)
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: workload client in %s: %w: %s", ns, err, strings.TrimSpace(stderr.String()))
	}
	var r workload.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("testbed: workload client output in %s: %w: %q", ns, err, stdout.String())
	}
	return &r, nil
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

// lineWatcher closes seen when a line starting with prefix is written.
type lineWatcher struct {
	prefix string
	seen   chan struct{}
	mu     sync.Mutex
	buf    []byte
	done   bool
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

// ScriptClient is a `workload run --script` client running in the sender
// namespace: its traffic runs without interruption while the caller opens
// and closes measurement windows (to change limits under live flows).
type ScriptClient struct {
	p      *Proc
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
}

// StartScriptClient starts the client in the sender namespace inside the
// cgroup at cgroupDir; cfg.Duration bounds its whole life. It returns once
// the client is connected (at most 15s).
func (tb *Testbed) StartScriptClient(bin, cgroupDir string, cfg workload.Config) (*ScriptClient, error) {
	p := tb.Command(tb.SenderNS, cgroupDir, bin, append(ClientArgs(cfg), "--script")...)
	stdin, err := p.Cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	c := &ScriptClient{p: p, stdin: stdin, lines: make(chan string, 16), stderr: &syncBuffer{}}
	p.Cmd.Stdout, p.Cmd.Stderr = pw, c.stderr
	if err := p.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.Wait()
		pw.Close()
	}()
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		io.Copy(io.Discard, pr)
	}()
	line, err := c.next(context.Background(), 15*time.Second)
	if err != nil {
		c.Close()
		return nil, err
	}
	if line != "ready" {
		c.Close()
		return nil, fmt.Errorf("testbed: workload client said %q, want ready", line)
	}
	return c, nil
}

func (c *ScriptClient) next(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("testbed: workload client ended: %v: %s", c.p.Wait(), strings.TrimSpace(c.stderr.String()))
		}
		return line, nil
	case <-ctx.Done():
		return "", ctx.Err()
	case <-t.C:
		return "", fmt.Errorf("testbed: workload client silent for %v", timeout)
	}
}

// Window measures for d in a window named name and returns its result.
func (c *ScriptClient) Window(ctx context.Context, name string, d time.Duration) (*workload.Result, error) {
	if _, err := fmt.Fprintf(c.stdin, "begin %s\n", name); err != nil {
		return nil, err
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return nil, ctx.Err()
	}
	if _, err := fmt.Fprintln(c.stdin, "end"); err != nil {
		return nil, err
	}
	line, err := c.next(ctx, 15*time.Second)
	if err != nil {
		return nil, err
	}
	var r workload.Result
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return nil, fmt.Errorf("testbed: workload client: %w: %q", err, line)
	}
	return &r, nil
}

// Close stops the client (bounded: killed after 5s).
func (c *ScriptClient) Close() error {
	fmt.Fprintln(c.stdin, "stop")
	c.stdin.Close()
	return c.p.WaitTimeout(5 * time.Second)
}
