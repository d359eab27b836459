package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/rate"
	"github.com/hbm-dev/hbm/internal/workload"
)

func init() { commands = append(commands, newWorkloadCmd) }

func newWorkloadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "workload",
		Short:  "Built-in traffic for tests and hbm eval (bulk streams, RPC loops, UDP)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	cmd.AddCommand(newWorkloadServeCmd(), newWorkloadRunCmd())
	return cmd
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func newWorkloadServeCmd() *cobra.Command {
	var listen string
	var delay time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Accept bulk, RPC and control connections until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			// UDP flows count on the same port number.
			pc, err := net.ListenPacket("udp", ln.Addr().String())
			if err != nil {
				ln.Close()
				return fmt.Errorf("udp sink: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "listening %s\n", ln.Addr())
			s := &workload.Server{Delay: delay}
			udpDone := make(chan error, 1)
			go func() { udpDone <- s.ServeUDP(ctx, pc) }()
			err = s.Serve(ctx, ln)
			pc.Close()
			return errors.Join(err, <-udpDone)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "[::]:5201", "address:port to listen on ([::] is IPv4 and IPv6)")
	cmd.Flags().DurationVar(&delay, "delay", 0, "sleep this long before each RPC reply (testing)")
	return cmd
}

func newWorkloadRunCmd() *cobra.Command {
	var (
		cfg                workload.Config
		rpcSize, replySize string
		udpRate, udpSize   string
		asJSON, script     bool
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run bulk streams and RPC loops against a workload server and report",
		Long: `Run bulk streams and RPC loops against "hbm workload serve" for --warmup,
then measure for --duration. An RPC loop sends its next request when the
reply is in (back to back), or with --rpc-rate N, N a second on schedule
(one behind its schedule sends at once and does not catch up).

With --script, the measurement windows come from stdin instead: "begin NAME"
opens one, "end" closes it and prints its result as a JSON line, "stop" ends
the run; --duration is then the longest the run may last. "ready" is printed
once connected.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.RPCSize, err = workload.ParseSize(rpcSize); err != nil {
				return usagef("--rpc-size: %v", err)
			}
			if cfg.ReplySize, err = workload.ParseSize(replySize); err != nil {
				return usagef("--reply-size: %v", err)
			}
			if cfg.Addr == "" {
				return usagef("--connect is required")
			}
			if cfg.UDP > 0 {
				r, err := rate.Parse(udpRate)
				if err != nil {
					return usagef("--udp-rate: %v", err)
				}
				cfg.UDPRate = float64(r)
				if cfg.UDPSize, err = workload.ParseSize(udpSize); err != nil {
					return usagef("--udp-size: %v", err)
				}
			}
			ctx, cancel := signalContext()
			defer cancel()
			out := cmd.OutOrStdout()
			if script {
				return workload.RunScript(ctx, cfg, os.Stdin, func(line string, r *workload.Result) error {
					if r != nil {
						b, err := json.Marshal(r)
						if err != nil {
							return err
						}
						line = string(b)
					}
					_, err := fmt.Fprintln(out, line)
					return err
				})
			}
			r, err := workload.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(out, r)
			}
			printResult(out, r)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "connect", "", "server address:port")
	f.IntVar(&cfg.Streams, "streams", 3, "bulk streams")
	f.IntVar(&cfg.RPCs, "rpc", 1, "request/response loops")
	f.StringVar(&rpcSize, "rpc-size", "10KB", "request size (K = 1024)")
	f.StringVar(&replySize, "reply-size", "64", "reply size")
	f.Float64Var(&cfg.RPCRate, "rpc-rate", 0, "requests each RPC loop starts per second (0: back to back)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measurement window")
	f.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "traffic before the window")
	f.StringVar(&cfg.CC, "cc", "", "TCP congestion control of every socket (default: the system's)")
	f.IntVar(&cfg.UDP, "udp", 0, "UDP sockets sending paced datagrams (send errors are counted, not fatal)")
	f.StringVar(&udpRate, "udp-rate", "100mbit", "UDP payload rate offered, all UDP sockets together")
	f.StringVar(&udpSize, "udp-size", strconv.Itoa(workload.DefaultUDPSize), "UDP datagram payload size")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&script, "script", false, "take measurement windows from stdin (see above)")
	f.BoolVar(&cfg.Hist, "hist", false, "include the RPC latency histogram in the JSON result (to merge clients)")
	return cmd
}

func printResult(w io.Writer, r *workload.Result) {
	fmt.Fprintf(w, "window %.2fs, cc %s, %d streams, %d rpc loops\n", r.Duration, r.CC, r.Streams, r.RPCs)
	fmt.Fprintf(w, "goodput %.1f Mbit/s (%s side; sender %.1f), total with RPC %.1f Mbit/s\n",
		r.Goodput/1e6, r.Source, r.SenderGoodput/1e6, r.TotalGoodput/1e6)
	fmt.Fprintf(w, "retransmits %d, CE echoed %d, srtt mean %.0f us max %.0f us, cwnd mean %.1f\n", r.Retransmits, r.DeliveredCE, r.RTT, r.RTTMax, r.Cwnd)
	if r.UDP > 0 {
		fmt.Fprintf(w, "udp %d sockets x %d B: offered %.1f Mbit/s, sent %.1f Mbit/s, %d send errors%s, received %.1f Mbit/s (%d datagrams)\n",
			r.UDP, r.UDPSize, r.UDPOffered/1e6, r.UDPSent/1e6, r.UDPSendErrors, ifErr(r.UDPSendError), r.UDPGoodput/1e6, r.UDPDatagrams)
	}
	if r.RPCs > 0 {
		l := r.RPC
		fmt.Fprintf(w, "rpc %d B: %d done, p50 %.0f p90 %.0f p99 %.0f p99.9 %.0f max %.0f us (stuck %.0f us)\n",
			r.RPCSize, l.Count, l.P50, l.P90, l.P99, l.P999, l.Max, l.InFlightMax)
	}
	for _, w2 := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", w2)
	}
}

func ifErr(s string) string {
	if s == "" {
		return ""
	}
	return " (first: " + s + ")"
}
