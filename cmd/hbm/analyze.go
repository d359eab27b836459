package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hbm-dev/hbm/internal/analyze"
	"github.com/hbm-dev/hbm/internal/analyze/schema"
	"github.com/hbm-dev/hbm/internal/eval"
)

// hbm analyze: the per-round-trip view of a packet capture.

func init() {
	commands = append(commands, newAnalyzeCmd)
}

func newAnalyzeCmd() *cobra.Command {
	var (
		asJSON       bool
		onlyRequests bool
		outDir       string
		rounds       int
		slowest      int
	)
	cmd := &cobra.Command{
		Use:   "analyze CAPTURE.pcap [--json | --requests | --slowest N] [--out DIR]",
		Short: "Split a packet capture's TCP connections into round trips and report each",
		Long: `Read a pcap or pcapng capture (tcpdump's, also gzip-compressed; Ethernet,
Linux cooked SLL/SLL2, loopback or raw IP) and split it into TCP connections
and each connection into round trips, from the data/ACK exchange itself: a
round starts when the data sender sends a segment while no round is open and
ends when the ACK covering that segment arrives.

Per connection (seen from the side that sent more payload): bytes delivered
(retransmissions excluded), duration, retransmissions in MSS-sized segments
and how many of them were spurious (DSACK, or an ACK too early to be the
retransmission's), RTT min/p50/p99 (Karn's rule: no samples from retransmitted
segments), CE-marked segments and ECE echoes. Per round: start, RTT, bytes
sent and acknowledged, bytes in flight at its end (the window), CE, ECE and
retransmissions.

Request/response connections (both sides sent data; an RPC) also get their
exchanges: a request is the requester's data up to the peer's next data, its
response. Each exchange's response time is split at the peer's first ACK of
the request's last byte: network (the path and the peer's kernel) and peer
(its application answering a request its kernel already had). Captured on the
requester's host, this tells a network tail from an application tail. The
requester is the side that sent the SYN, else the one with the higher port.
Where the capture shows an exchange's end (the next request, or a FIN), its
complete time is the request's first byte to the response's last.

Requests (printed last; "requests" in the JSON): every connection's completed
exchanges pooled, for a server's capture of many clients, one connection per
request or not: request to the response's last byte; for connections whose
SYN is in the capture, the SYN to the first request (setup: a handshake that
waited, queued behind a shaper's backlog or held by HBM's handshake gate,
shows here, where a client that times a request from its write does not
look) and the SYN to the first response's last byte; and the exchanges by
when their request began, in 100 ms bins (a slow start, or request times
that swing together, show as bins of other means). --requests prints that
summary alone.

--slowest N prints instead the capture's N slowest exchanges (request's first
byte to the response's first), each with the packets of both directions in
that span: sequence numbers from each direction's first data byte, SACK
blocks, CE marks. A tail shows its cause there: a request lost whole and sent
again by the loss probe two jiffies later, a window that held it, a peer
that answered late.

A capture of headers only (tcpdump -s 128) is enough: payload lengths come
from the IP headers. A capture whose last record is cut short (tcpdump
killed mid-write) is analysed up to it, with a warning on stderr (and in the
JSON's "warnings").

--json prints the analysis as JSON; --out DIR writes DIR/analysis.json and
DIR/analysis.html, a self-contained page with per-round charts of each
connection's rate, window and marks.`,
		Example: `  tcpdump -i eth0 -s 128 -w flow.pcap tcp port 5201
  hbm analyze flow.pcap
  hbm analyze flow.pcap --json | jq '.connections[0].rtt_us'
  hbm analyze rpc.pcap --json | jq '.connections[].exchanges | select(.) | .network_us.p99'
  tcpdump -i eth0 -s 128 -w web.pcap tcp port 80
  hbm analyze web.pcap --requests
  hbm analyze web.pcap --json | jq '.requests.total_us'
  hbm analyze rpc.pcap --slowest 3
  hbm analyze flow.pcap --out report/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rounds < 0 {
				return usagef("--rounds %d: want 0 (all) or more", rounds)
			}
			if cmd.Flags().Changed("slowest") {
				if slowest < 1 {
					return usagef("--slowest %d: want 1 or more", slowest)
				}
				list, total, err := analyze.SlowestFile(args[0], slowest)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return writeJSON(out, struct {
						Exchanges int64                 `json:"exchanges"`
						Slowest   []schema.SlowExchange `json:"slowest"`
					}{total, list})
				}
				printSlowest(out, list, total)
				return nil
			}
			rep, err := analyze.File(args[0])
			if err != nil {
				return err
			}
			for _, w := range rep.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "hbm: warning: %s: %s\n", args[0], w)
			}
			if outDir != "" {
				if err := writeAnalysis(outDir, args[0], rep); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, rep)
			}
			if onlyRequests {
				if rep.Requests == nil {
					fmt.Fprintln(out, "requests: none completed (no request/response exchange whose end the capture shows)")
				}
				printRequests(out, rep.Requests)
			} else {
				printAnalysis(out, rep, rounds)
			}
			if outDir != "" {
				fmt.Fprintf(out, "\nwrote %s and %s\n", filepath.Join(outDir, "analysis.json"), filepath.Join(outDir, "analysis.html"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the analysis as JSON")
	cmd.Flags().StringVar(&outDir, "out", "", "write analysis.json and analysis.html (per-round charts) into `DIR`")
	cmd.Flags().IntVar(&rounds, "rounds", 20, "round trips listed per connection in the table (0: all)")
	cmd.Flags().BoolVar(&onlyRequests, "requests", false, "print only the requests summary (every connection's exchanges pooled): for a server's capture of many connections")
	cmd.Flags().IntVar(&slowest, "slowest", 0, "print only the `N` slowest request/response exchanges, each with its packets (with --json: as JSON)")
	cmd.MarkFlagsMutuallyExclusive("requests", "json")
	cmd.MarkFlagsMutuallyExclusive("slowest", "requests")
	cmd.MarkFlagsMutuallyExclusive("slowest", "out")
	cmd.MarkFlagsMutuallyExclusive("slowest", "rounds")
	return cmd
}

// printSlowest prints the slowest exchanges, each with its packets.
func printSlowest(out io.Writer, list []schema.SlowExchange, total int64) {
	if len(list) == 0 {
		fmt.Fprintln(out, "slowest: no request/response exchange in the capture")
		return
	}
	fmt.Fprintf(out, "slowest %d of %d exchanges (the request's first byte to the response's first):\n", len(list), total)
	for i, x := range list {
		at := time.UnixMicro(x.StartUnixUS).UTC().Format("15:04:05.000000")
		fmt.Fprintf(out, "\n%d. %s -> %s, request at %s: response %s (network %s, peer %s)\n",
			i+1, x.Requester, x.Responder, at, usStr(x.ResponseUS), usStr(x.NetworkUS), usStr(x.PeerUS))
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "at\t \tflags\tseq\tlen\tack\t  sack")
		for _, p := range x.Packets {
			dir, flags := "<", p.Flags
			if p.FromRequester {
				dir = ">"
			}
			if p.CE {
				flags += " CE"
			}
			sack := ""
			for j, b := range p.SACK {
				sep := ","
				if j == 0 {
					sep = "  "
				}
				sack += fmt.Sprintf("%s%d-%d", sep, b[0], b[1])
			}
			fmt.Fprintf(tw, "%.3fms\t%s\t%s\t%d\t%d\t%d\t%s\n", p.AtUS/1e3, dir, flags, p.Seq, p.Len, p.Ack, sack)
		}
		tw.Flush()
		if x.PacketsLeftOut > 0 {
			fmt.Fprintf(out, "  ... %d more packets in the span\n", x.PacketsLeftOut)
		}
	}
	fmt.Fprintln(out, "\n> requester to responder, < back; sequence numbers from each direction's first data byte")
}

// writeAnalysis writes DIR/analysis.json and DIR/analysis.html, never
// through a symbolic link: DIR must be a real directory (a link there is
// refused), and each file is written to a temporary file renamed over it.
func writeAnalysis(dir, capture string, rep *schema.Report) error {
	if err := eval.MkdirNoFollow(dir); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := eval.WriteFileNoFollow(dir, "analysis.json", func(w io.Writer) error {
		_, err := w.Write(append(js, '\n'))
		return err
	}); err != nil {
		return err
	}
	return eval.WriteFileNoFollow(dir, "analysis.html", func(w io.Writer) error {
		return analyze.WriteHTML(w, rep, filepath.Base(capture))
	})
}

func printAnalysis(out io.Writer, rep *schema.Report, maxRounds int) {
	for i, c := range rep.Connections {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "%s -> %s\n", c.Src, c.Dst)
		fmt.Fprintf(out, "  bytes %d in %s, %d packets, %d round trips\n", c.Bytes, usStr(c.DurationUS), c.Packets, len(c.Rounds))
		fmt.Fprintf(out, "  retransmissions %d (spurious %d), CE %d, ECE %d\n", c.Retransmissions, c.SpuriousRetransmissions, c.CE, c.ECE)
		if c.RTT.Samples > 0 {
			fmt.Fprintf(out, "  RTT min %s, p50 %s, p99 %s (%d samples)\n", usStr(c.RTT.Min), usStr(c.RTT.P50), usStr(c.RTT.P99), c.RTT.Samples)
		} else {
			fmt.Fprintf(out, "  RTT: no samples\n")
		}
		if e := c.Exchanges; e != nil {
			fmt.Fprintf(out, "  %d request/response exchanges, requests from %s: response p50 %s, p99 %s; network p50 %s, p99 %s; peer p50 %s, p99 %s\n",
				e.Count, e.Requester, usStr(e.Response.P50), usStr(e.Response.P99), usStr(e.Network.P50), usStr(e.Network.P99), usStr(e.Peer.P50), usStr(e.Peer.P99))
			if l := e.Complete; l != nil {
				fmt.Fprintf(out, "  request to the response's last byte p50 %s, p99 %s\n", usStr(l.P50), usStr(l.P99))
			}
		}
		if len(c.Rounds) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "round\tt\trtt\tsent\tacked\tin flight\tCE\tECE\tretrans\t")
		for j, r := range c.Rounds {
			if maxRounds > 0 && j == maxRounds {
				break
			}
			rtt := usStr(r.RTT)
			if r.Incomplete {
				rtt = "(open)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", j+1, usStr(r.TUS), rtt, r.SentBytes, r.AckedBytes, r.InflightBytes, r.CE, r.ECE, r.Retransmissions)
		}
		tw.Flush()
		if maxRounds > 0 && len(c.Rounds) > maxRounds {
			fmt.Fprintf(out, "  ... %d more round trips (--rounds 0 lists all; --json, --out)\n", len(c.Rounds)-maxRounds)
		}
	}
	if rep.Requests != nil {
		fmt.Fprintln(out)
		printRequests(out, rep.Requests)
	}
}

// printRequests prints the exchanges of every connection pooled
// (schema.Requests): what a server's clients waited for.
func printRequests(out io.Writer, r *schema.Requests) {
	if r == nil {
		return
	}
	l := r.Complete
	fmt.Fprintf(out, "requests: %d completed, request to the response's last byte p50 %s, p90 %s, p99 %s, max %s\n",
		r.Count, usStr(l.P50), usStr(l.P90), usStr(l.P99), usStr(l.Max))
	if r.Setup != nil {
		fmt.Fprintf(out, "  on the %s whose SYN the capture holds: SYN to the first request p50 %s, p99 %s; SYN to that response's last byte p50 %s, p99 %s, max %s\n",
			analyze.Connections(r.Opened), usStr(r.Setup.P50), usStr(r.Setup.P99), usStr(r.Total.P50), usStr(r.Total.P99), usStr(r.Total.Max))
	}
	if lo, hi, n := analyze.TimelineRange(r, timelineMinCount); n > 1 {
		fmt.Fprintf(out, "  by when they began (%d bins of %s with %d or more): mean from %s to %s\n",
			n, usStr(r.TimelineBinUS), timelineMinCount, usStr(lo), usStr(hi))
	}
}

// timelineMinCount is the fewest exchanges a timeline bin needs to count in
// the printed range of means.
const timelineMinCount = 5

func usStr(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3fs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2fms", v/1e3)
	default:
		return fmt.Sprintf("%.0fµs", v)
	}
}
