package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus/admin"
)

// runAgentsLimit is `toolbus agents limit NAME PER_MINUTE[:BURST]`: the
// rate limit of one expert agent across all its callers; "" or 0 lifts it.
func runAgentsLimit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agents limit", stderr)
	d := addDoorFlags(fs, true)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: toolbus agents limit NAME PER_MINUTE[:BURST] [flags]\n\n"+
			"Limits the tools/call requests the expert agent NAME (its name on the bus) gets from all\n"+
			"callers together, beside the per-token and per-user limits: the stricter refuses, with\n"+
			"HTTP 429 and Retry-After. 600:50 is 600 a minute, 50 at once; \"\" or 0 lifts the limit.\n"+
			"Through --server it applies at once; on the store, at the next start or SIGHUP.\n\n")
		fs.PrintDefaults()
	}
	// Positional, before the door's flags: toolbus agents limit search 600:50 --data-dir ./data
	var pos []string
	for len(pos) < 2 && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New(`agents limit: want ` + "`toolbus agents limit NAME PER_MINUTE[:BURST]`" + ` (e.g. 600:50; "" lifts it)`)
	}
	dr, closeDoor, err := d.open(ctx, "agents limit", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	got, err := dr.SetAgentLimit(ctx, pos[0], admin.AgentLimitRequest{Limit: pos[1]})
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, got)
	}
	if got.Limit == "" {
		fmt.Fprintf(stdout, "agent %s has no rate limit of its own\n", got.Agent)
	} else {
		fmt.Fprintf(stdout, "agent %s: at most %s, all callers together\n", got.Agent, got.Rate)
	}
	if !d.remote() {
		_, err = fmt.Fprintln(stdout, "(stored: a running toolbus applies it at its next start or SIGHUP)")
	}
	return err
}

// runAgentsLimits is `toolbus agents limits`: the agents with a rate limit
// of their own.
func runAgentsLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agents limits", stderr)
	d := addDoorFlags(fs, true)
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	dr, closeDoor, err := d.open(ctx, "agents limits", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	all, err := dr.AgentLimits(ctx)
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tLIMIT\tRATE")
	for _, l := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Agent, l.Limit, l.Rate)
	}
	return tw.Flush()
}
