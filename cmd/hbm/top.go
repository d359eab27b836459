package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/hbm-dev/hbm/internal/dataplane"
	"github.com/hbm-dev/hbm/internal/top"
)

// hbm top: the refresh loop and the terminal; the view is internal/top.

func init() {
	commands = append(commands, newTopCmd)
}

func newTopCmd() *cobra.Command {
	var (
		interval time.Duration
		count    int
	)
	cmd := &cobra.Command{
		Use:   "top [--interval 1s] [-n COUNT]",
		Short: "Live view of every limited group: rate against limit, marks and drops per second",
		Long: `Show every limited group and direction with its rate over the last interval
against its limit, CE marks and cwr returns per second and drops per second,
the groups closest to their limit first; refreshed every interval. It reads
the pinned counters itself: no daemon needed. On a terminal each frame
replaces the last; otherwise frames are printed one after another.`,
		Example: `  hbm top
  hbm top --interval 5s
  hbm top -n 1 > snapshot.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return usagef("top: --interval must be at least 100ms")
			}
			if err := requireRoot(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			_, err := unix.IoctlGetTermios(int(os.Stdout.Fd()), unix.TCGETS)
			tty := err == nil
			prev, err := sample()
			if err != nil {
				return err
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			for i := 0; count == 0 || i < count; i++ {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				cur, err := sample()
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if tty {
					fmt.Fprint(out, "\x1b[H\x1b[2J")
				} else if i > 0 {
					fmt.Fprintln(out)
				}
				if err := top.Render(out, top.Rows(prev, cur), cur.At, interval); err != nil {
					return err
				}
				prev = cur
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh every `DURATION`")
	cmd.Flags().IntVarP(&count, "count", "n", 0, "stop after COUNT frames (0: until Ctrl-C)")
	return cmd
}

// sample reads every limit's counters (a shared lock, released at once).
func sample() (top.Sample, error) {
	m, err := dataplane.OpenReadOnly(pinDir)
	if err != nil {
		return top.Sample{}, err
	}
	s := top.Sample{At: time.Now()}
	if m == nil {
		return s, nil
	}
	defer m.Close()
	s.Entries, err = m.List()
	return s, err
}
