package netlab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hbm-dev/hbm/internal/workload"
)

// ServerPort is the port tests' workload servers listen on.
const ServerPort = 5201

// StartServer starts `bin workload serve --listen listen` in host, inside
// the cgroup at cgroupDir ("" for none), and waits at most 10s until it
// listens.
func (l *Lab) StartServer(bin, host, cgroupDir, listen string) (*Proc, error) {
	return l.StartServerNice(bin, host, cgroupDir, listen, 0)
}

// StartServerNice is StartServer at CPU priority nice (Proc.Nice).
func (l *Lab) StartServerNice(bin, host, cgroupDir, listen string, nice int) (*Proc, error) {
	p := l.Command(host, cgroupDir, bin, "workload", "serve", "--listen", listen).Nice(nice)
	w := newLineWatcher("listening")
	stderr := &Buffer{}
	p.Cmd.Stdout, p.Cmd.Stderr = w, stderr
	if err := p.Start(); err != nil {
		return nil, err
	}
	select {
	case <-w.seen:
		return p, nil
	case <-p.Done():
		return nil, fmt.Errorf("netlab: workload server on %s exited: %v: %s", host, p.Wait(), strings.TrimSpace(stderr.String()))
	case <-time.After(10 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("netlab: workload server on %s not listening after 10s: %s", host, strings.TrimSpace(stderr.String()))
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
	if cfg.RPCRate > 0 {
		a = append(a, "--rpc-rate", strconv.FormatFloat(cfg.RPCRate, 'g', -1, 64))
	}
	if cfg.CC != "" {
		a = append(a, "--cc", cfg.CC)
	}
	if cfg.UDP > 0 {
		a = append(a, "--udp", strconv.Itoa(cfg.UDP), "--udp-rate", strconv.FormatUint(uint64(cfg.UDPRate), 10)+"bit")
		if cfg.UDPSize > 0 {
			a = append(a, "--udp-size", strconv.Itoa(cfg.UDPSize))
		}
	}
	return a
}

// RunClient runs `bin workload run --json` with cfg in host, inside the
// cgroup at cgroupDir ("" for none), and returns its result. It is bounded
// by the run's warm-up and duration plus 30s.
func (l *Lab) RunClient(ctx context.Context, bin, host, cgroupDir string, cfg workload.Config) (*workload.Result, error) {
	p := l.Command(host, cgroupDir, bin, ClientArgs(cfg)...)
	var stdout, stderr Buffer
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
		return nil, fmt.Errorf("netlab: workload client in %s: %w: %s", host, err, strings.TrimSpace(stderr.String()))
	}
	var r workload.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("netlab: workload client output in %s: %w: %q", host, err, stdout.String())
	}
	return &r, nil
}

// ScriptClient is a `workload run --script` client: its traffic runs
// without interruption while the caller opens and closes measurement
// windows.
type ScriptClient struct {
	p      *Proc
	stdin  io.WriteCloser
	lines  chan string
	stderr *Buffer
}

// StartScriptClient starts `bin ARGS --script` (args: `workload run ...`)
// in host, inside the cgroup at cgroupDir; the run's --duration bounds its
// whole life. It returns once the client says it is connected (at most
// 15s), unless noWait.
func (l *Lab) StartScriptClient(ctx context.Context, bin, host, cgroupDir string, args []string, noWait bool) (*ScriptClient, error) {
	return l.StartScriptClientNice(ctx, bin, host, cgroupDir, args, noWait, 0)
}

// StartScriptClientNice is StartScriptClient at CPU priority nice
// (Proc.Nice).
func (l *Lab) StartScriptClientNice(ctx context.Context, bin, host, cgroupDir string, args []string, noWait bool, nice int) (*ScriptClient, error) {
	p := l.Command(host, cgroupDir, bin, append(args, "--script")...).Nice(nice)
	stdin, err := p.Cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	c := &ScriptClient{p: p, stdin: stdin, lines: make(chan string, 16), stderr: &Buffer{}}
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
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		io.Copy(io.Discard, pr)
	}()
	if noWait {
		return c, nil
	}
	if err := c.Ready(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Ready waits (at most 15s) for the client's "ready".
func (c *ScriptClient) Ready(ctx context.Context) error {
	line, err := c.Next(ctx, 15*time.Second)
	if err != nil {
		return err
	}
	if line != "ready" {
		return fmt.Errorf("netlab: workload client said %q, want ready", line)
	}
	return nil
}

// Next returns the client's next output line, waiting at most timeout.
func (c *ScriptClient) Next(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("netlab: workload client ended: %v: %s", c.p.Wait(), c.stderr.LastLine())
		}
		return line, nil
	case <-ctx.Done():
		return "", ctx.Err()
	case <-t.C:
		return "", fmt.Errorf("netlab: workload client silent for %v", timeout)
	}
}

// Send writes one command line ("begin NAME", "end", "stop") to the client.
func (c *ScriptClient) Send(cmd string) error {
	_, err := fmt.Fprintln(c.stdin, cmd)
	return err
}

// Result reads the client's next line as a window's result.
func (c *ScriptClient) Result(ctx context.Context) (*workload.Result, error) {
	line, err := c.Next(ctx, 15*time.Second)
	if err != nil {
		return nil, err
	}
	var r workload.Result
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return nil, fmt.Errorf("netlab: workload client: %w: %.200q", err, line)
	}
	return &r, nil
}

// Window measures for d in a window named name and returns its result.
func (c *ScriptClient) Window(ctx context.Context, name string, d time.Duration) (*workload.Result, error) {
	if err := c.Send("begin " + name); err != nil {
		return nil, err
	}
	if err := workload.SleepCtx(ctx, d); err != nil {
		return nil, err
	}
	if err := c.Send("end"); err != nil {
		return nil, err
	}
	return c.Result(ctx)
}

// Close stops the client (bounded: killed after 5s).
func (c *ScriptClient) Close() error {
	c.Send("stop")
	c.stdin.Close()
	return c.p.WaitTimeout(5 * time.Second)
}
