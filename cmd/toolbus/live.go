package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/admin"
)

// The commands that show a running toolbus: they need --server URL --token T.
//
//	toolbus clients [--json]
//	toolbus agents [--json]
//	toolbus contexts list [--user U] [--json]
//	toolbus contexts evict --context PLATFORM/USER/SESSION/ENTITYTYPE/ENTITYID

func runClients(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("clients", stderr)
	d := addDoorFlags(fs, true)
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	dr, closeDoor, err := d.open(ctx, "clients", serverOnly)
	if err != nil {
		return err
	}
	defer closeDoor()
	cls, err := dr.Clients(ctx)
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, cls)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT-ID\tUSERNAME\tREMOTE\tLISTENER\tMQTT\tCONNECTED-SINCE")
	for _, c := range cls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ClientID, c.Username, c.Remote, c.Listener,
			mqttVersion(c.ProtocolVersion), formatOptTime(c.ConnectedSince, "-"))
	}
	return tw.Flush()
}

func mqttVersion(v int) string {
	switch v {
	case 3:
		return "3.1"
	case 4:
		return "3.1.1"
	}
	return strconv.Itoa(v)
}

func runAgents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agents", stderr)
	d := addDoorFlags(fs, true)
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	dr, closeDoor, err := d.open(ctx, "agents", serverOnly)
	if err != nil {
		return err
	}
	defer closeDoor()
	ag, err := dr.Agents(ctx)
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, ag)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// One row per agent (its name on the bus), then its instances and tools.
	type summary struct {
		online, instances, tools int
		lastSeen                 time.Time
	}
	sums := map[string]*summary{}
	var names []string
	sum := func(name string) *summary {
		if sums[name] == nil {
			sums[name] = &summary{}
			names = append(names, name)
		}
		return sums[name]
	}
	for _, a := range ag.Agents {
		s := sum(a.Agent)
		s.instances++
		if a.Online {
			s.online++
		}
		if a.Since.After(s.lastSeen) {
			s.lastSeen = a.Since
		}
	}
	for _, t := range ag.Tools {
		sum(t.Agent).tools++
	}
	slices.Sort(names)
	fmt.Fprintln(tw, "AGENT\tONLINE\tINSTANCES\tTOOLS\tLAST-CHANGE")
	for _, n := range names {
		s := sums[n]
		last := "-"
		if !s.lastSeen.IsZero() {
			last = s.lastSeen.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%t\t%d/%d\t%d\t%s\n", n, s.online > 0, s.online, s.instances, s.tools, last)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "AGENT\tCLIENT-ID\tNAME\tVERSION\tONLINE\tSINCE")
	for _, a := range ag.Agents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\n", a.Agent, a.ClientID, orElse(a.Name, "-"), orElse(a.Version, "-"), a.Online,
			a.Since.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(tw)
	if ag.ToolsError != "" {
		fmt.Fprintf(tw, "tools: %s\n", ag.ToolsError)
		return tw.Flush()
	}
	fmt.Fprintln(tw, "TOOL\tAGENT\tDESCRIPTION")
	for _, t := range ag.Tools {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Agent, orElse(oneLine(t.Description), "-"))
	}
	return tw.Flush()
}

// oneLine cuts a description at its first line break, for a table cell.
func oneLine(s string) string {
	for i, c := range s {
		if c == '\n' || c == '\r' {
			return s[:i] + " …"
		}
	}
	return s
}

func runContexts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("contexts: want list or evict")
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("contexts "+sub, stderr)
	d := addDoorFlags(fs, sub == "list")
	var user, key *string
	switch sub {
	case "list":
		user = fs.String("user", "", "only the contexts of this user (default: every user)")
	case "evict":
		key = fs.String("context", "", "the context, PLATFORM/USER/SESSION/ENTITYTYPE/ENTITYID as 'contexts list' shows it")
	default:
		return fmt.Errorf("contexts: unknown subcommand %q (want list or evict)", sub)
	}
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if sub == "evict" && *key == "" {
		return errors.New("contexts evict: --context is required")
	}
	dr, closeDoor, err := d.open(ctx, "contexts "+sub, serverOnly)
	if err != nil {
		return err
	}
	defer closeDoor()
	if sub == "evict" {
		if err := dr.EvictContext(ctx, *key); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "evicted context %s (unsubscribed; its next call subscribes again)\n", *key)
		return err
	}
	cs, err := dr.Contexts(ctx, *user)
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, cs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTEXT\tUSER\tAGE\tIDLE\tIN-FLIGHT")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", c.Key(), c.UserID, secondsString(c.AgeSeconds), secondsString(c.IdleSeconds), c.InFlight)
	}
	return tw.Flush()
}

func secondsString(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

// runAgentsGrant is `toolbus agents grant --user U --agents a,b`: every
// token of the user may use only those agents' tools (--agents "" lifts
// the limit).
func runAgentsGrant(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agents grant", stderr)
	d := addDoorFlags(fs, true)
	user := fs.String("user", "", "the user whose tokens are limited")
	agents := fs.String("agents", "", `comma-separated expert agents (their MQTT usernames); "" = every agent again`)
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if *user == "" {
		return errors.New("agents grant: --user is required")
	}
	dr, closeDoor, err := d.open(ctx, "agents grant", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	got, err := dr.SetUserAgents(ctx, *user, admin.UserAgentsRequest{Agents: splitList(*agents)})
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, got)
	}
	_, err = fmt.Fprintf(stdout, "user %s may use: %s\n", got.User, formatAgents(got.Agents))
	return err
}

// runAgentsGrants is `toolbus agents grants`: the users limited to some
// agents.
func runAgentsGrants(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agents grants", stderr)
	d := addDoorFlags(fs, true)
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	dr, closeDoor, err := d.open(ctx, "agents grants", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	all, err := dr.ListUserAgents(ctx)
	if err != nil {
		return err
	}
	if d.json {
		return printJSON(stdout, all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tAGENTS")
	for _, u := range all {
		fmt.Fprintf(tw, "%s\t%s\n", u.User, strings.Join(u.Agents, ","))
	}
	return tw.Flush()
}
