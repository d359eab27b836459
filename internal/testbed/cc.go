package testbed

import (
	"fmt"
	"strings"
)

// RouteCC sets the congestion control of the testbed's routes on dev in ns;
// see SetRouteCC.
func (tb *Testbed) RouteCC(ns, dev, cc string) error { return SetRouteCC(ns, dev, cc) }

// SetRouteCC sets the congestion control of ns's IPv4 and IPv6 routes on dev
// (ip route change ... congctl CC). DCTCP needs it at the receiver too: the
// workload server picks no congestion control, and a Linux listener accepts
// ECN on a DCTCP (ECT-marked) SYN only if its own congestion control needs
// ECN; `congctl dctcp` on the route gives it one that does. An empty cc
// removes the per-route setting.
func SetRouteCC(ns, dev, cc string) error {
	for _, fam := range []string{"-4", "-6"} {
		out, err := output("ip", "-n", ns, fam, "route", "show", "dev", dev)
		if err != nil {
			return err
		}
		for _, route := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(route)
			if len(f) == 0 || f[0] == "multicast" || strings.HasPrefix(f[0], "fe80:") || f[0] == "ff00::/8" {
				continue
			}
			// Keep the destination and its qualifiers up to the first
			// attribute "ip route show" adds; drop any old congctl.
			var dst []string
			for i := 0; i < len(f); i++ {
				if f[i] == "congctl" {
					i++
					if i < len(f) && f[i] == "lock" {
						i++
					}
					continue
				}
				dst = append(dst, f[i])
			}
			args := append([]string{"-n", ns, fam, "route", "change"}, dst...)
			args = append(args, "dev", dev)
			if cc != "" {
				args = append(args, "congctl", cc)
			}
			if err := run("ip", args...); err != nil {
				return fmt.Errorf("testbed: route congctl %q in %s: %w", cc, ns, err)
			}
		}
	}
	return nil
}
