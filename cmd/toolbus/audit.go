package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// runAudit prints audit records, newest first:
//
//	toolbus audit [--server URL --token T | --store-url URL | --data-dir DIR] [--since T] [--until T] [--user U] [--tool NAME]
//	              [--agent A] [--outcome O] [--kind K] [--limit N] [--json]
//
// --since and --until take an RFC 3339 time or a duration back from now
// ("1h"). Records reach the store within serve's --audit-flush-interval.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", stderr)
	d := addDoorFlags(fs, true)
	since := fs.String("since", "", `oldest record: RFC 3339 time (2026-11-26T10:00:00Z) or a duration back from now ("1h")`)
	until := fs.String("until", "", "newest record (exclusive): RFC 3339 time or a duration back from now")
	user := fs.String("user", "", "only this user (or MQTT username)")
	tool := fs.String("tool", "", "only calls of this tool")
	agent := fs.String("agent", "", "only calls of the tools this expert agent serves")
	outcome := fs.String("outcome", "", "only this outcome: ok, tool_error, timeout, refused, error, cancelled")
	kind := fs.String("kind", "", "only this kind: tool_call, refused, admin, agent_connect, agent_disconnect, mqtt_denied, oauth, console")
	limit := fs.Int("limit", 100, "most records printed (pages of up to 1000 are fetched as needed)")
	if err := parseDoorFlags(fs, d, args); err != nil {
		return err
	}
	if *limit < 1 {
		return fmt.Errorf("audit: --limit %d: want 1 or more", *limit)
	}
	now := time.Now()
	q := admin.AuditQuery{User: *user, Tool: *tool, Agent: *agent, Outcome: *outcome, Kind: *kind}
	var err error
	if q.Since, err = parseWhen(*since, now); err != nil {
		return fmt.Errorf("audit: --since: %w", err)
	}
	if q.Until, err = parseWhen(*until, now); err != nil {
		return fmt.Errorf("audit: --until: %w", err)
	}
	dr, closeDoor, err := d.open(ctx, "audit", existingStore)
	if err != nil {
		return err
	}
	defer closeDoor()
	var page admin.AuditPage
	for len(page.Events) < *limit {
		q.Limit = min(*limit-len(page.Events), store.MaxAuditLimit)
		p, err := dr.Audit(ctx, q)
		if err != nil {
			return err
		}
		page.Events, page.Next = append(page.Events, p.Events...), p.Next
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if page.Events == nil {
		page.Events = []admin.AuditEvent{}
	}
	if d.json {
		return printJSON(stdout, page)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tACTOR\tWHAT\tSOURCE\tOUTCOME\tDURATION\tREASON\tREQUEST")
	for _, e := range page.Events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format("2006-01-02T15:04:05.000Z07:00"), e.Kind,
			orElse(actorOf(e), "-"), orElse(whatOf(e), "-"), orElse(e.Source, "-"), e.Outcome, durationOf(e),
			orElse(e.Reason, "-"), orElse(e.RequestID, "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(stderr, "more records: raise --limit, or narrow with --since/--until\n")
	}
	return nil
}

// parseWhen reads a --since/--until value: "" (none), an RFC 3339 time, or
// a duration back from now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time or a duration such as 1h", s)
	}
	return now.Add(-d), nil
}

func actorOf(e admin.AuditEvent) string {
	var parts []string
	for _, p := range []string{e.User, e.TokenID, e.ClientID} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " ")
}

func whatOf(e admin.AuditEvent) string {
	switch {
	case e.Tool != "" && e.Agent != "":
		return e.Tool + " (" + e.Agent + ")"
	case e.Tool != "":
		return e.Tool
	case e.Status != 0:
		return strconv.Itoa(e.Status) + " " + strings.TrimSpace(e.Action+" "+e.Target)
	}
	return strings.TrimSpace(e.Action + " " + e.Target)
}

func durationOf(e admin.AuditEvent) string {
	if e.Kind != store.AuditToolCall {
		return "-"
	}
	return strconv.FormatFloat(e.DurationMs, 'f', 1, 64) + "ms"
}

// recordLocalChange is the store door's admin.Options.OnChange: a change
// made by the CLI without a server is written to the audit log at
// once (there is no writer to queue it for). A failed write is reported on
// stderr, not hidden.
func recordLocalChange(st *store.Store, stderr io.Writer) func(admin.Change) {
	return func(c admin.Change) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.InsertAudit(ctx, []store.AuditEvent{audit.AdminChangeEvent(c)}); err != nil {
			fmt.Fprintf(stderr, "toolbus: warning: the audit log did not record this change: %v\n", err)
		}
	}
}

// addAuditFlags adds serve's audit flags to fs; the function it returns
// checks them once parsed and fills in cfg.Retention.
func addAuditFlags(fs *flag.FlagSet, cfg *server.AuditConfig) func() error {
	fs.DurationVar(&cfg.FlushInterval, "audit-flush-interval", audit.DefaultFlushInterval,
		"longest an audit record waits before it is written (one transaction per batch); a crash loses at most this much of the audit log")
	retention := fs.Duration("audit-retention", audit.DefaultRetention, "how long audit records are kept (0 = forever)")
	fs.Int64Var(&cfg.MaxRows, "audit-max-rows", 0, "most audit records kept, the oldest deleted first (0 = no bound)")
	fs.IntVar(&cfg.QueueSize, "audit-queue-size", audit.DefaultQueueSize,
		"audit records that may wait to be written; beyond it they are dropped, counted (toolbus_audit_dropped_total) and logged")
	aggregate := fs.Duration("audit-aggregate-window", audit.DefaultAggregateWindow,
		"repeated refusals of one kind from one source (failed MQTT logins, ACL denials, refused HTTP and OAuth requests) are recorded one by one up to 5 in this window, then counted in one record; 0 records each one")
	return func() error {
		switch {
		case cfg.FlushInterval <= 0:
			return fmt.Errorf("--audit-flush-interval %s: want more than 0", cfg.FlushInterval)
		case *retention < 0:
			return fmt.Errorf("--audit-retention %s: want 0 (forever) or more", *retention)
		case cfg.MaxRows < 0:
			return fmt.Errorf("--audit-max-rows %d: want 0 (no bound) or more", cfg.MaxRows)
		case cfg.QueueSize < 1:
			return fmt.Errorf("--audit-queue-size %d: want 1 or more", cfg.QueueSize)
		}
		if cfg.AggregateWindow = *aggregate; *aggregate <= 0 {
			cfg.AggregateWindow = -1 // server.AuditConfig: negative records each refusal
		}
		cfg.Retention = *retention
		if cfg.Retention == 0 {
			cfg.Retention = -1 // server.AuditConfig: negative keeps forever
		}
		return nil
	}
}
