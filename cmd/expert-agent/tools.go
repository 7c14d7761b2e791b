package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

// maxCountdownSeconds bounds countdown so that one call cannot hold a worker
// for long; the gateway's call timeout (30 s by default) is shorter anyway.
const maxCountdownSeconds = 300

// tools returns the reference agent's tools. step is the length of one
// countdown step (a second in production; tests shorten it); now is the
// clock of time_now.
func tools(step time.Duration, now func() time.Time) []expertagent.Tool {
	return []expertagent.Tool{
		{
			Tool: mcp.Tool{
				Name:        "echo",
				Title:       "Echo",
				Description: "Returns the given text unchanged. Useful to check that the expert agent is reachable.",
				InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string","description":"Text to echo back."}},"required":["text"],"additionalProperties":false}`),
				Annotations: readOnlyAnnotations("Echo"),
			},
			Handler: echo,
		},
		{
			Tool: mcp.Tool{
				Name:        "word_count",
				Title:       "Word count",
				Description: "Counts the words (runs of non-space characters), lines, characters (Unicode code points) and bytes of a text.",
				InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string","description":"Text to count."}},"required":["text"],"additionalProperties":false}`),
				OutputSchema: []byte(`{"type":"object","properties":{"words":{"type":"integer"},"lines":{"type":"integer"},` +
					`"characters":{"type":"integer"},"bytes":{"type":"integer"}},"required":["words","lines","characters","bytes"]}`),
				Annotations: readOnlyAnnotations("Word count"),
			},
			Handler: wordCount,
		},
		{
			Tool: mcp.Tool{
				Name:         "sha256",
				Title:        "SHA-256",
				Description:  "Returns the SHA-256 digest of a text (its UTF-8 bytes) as lowercase hex.",
				InputSchema:  []byte(`{"type":"object","properties":{"text":{"type":"string","description":"Text to hash."}},"required":["text"],"additionalProperties":false}`),
				OutputSchema: []byte(`{"type":"object","properties":{"sha256":{"type":"string"}},"required":["sha256"]}`),
				Annotations:  readOnlyAnnotations("SHA-256"),
			},
			Handler: sha256Tool,
		},
		{
			Tool: mcp.Tool{
				Name:  "countdown",
				Title: "Countdown",
				Description: fmt.Sprintf("Counts down from the given number of seconds (1 to %d), reporting progress every second; "+
					"it can be cancelled. Useful to try progress notifications and cancellation.", maxCountdownSeconds),
				InputSchema: []byte(fmt.Sprintf(`{"type":"object","properties":{"seconds":{"type":"integer","minimum":1,"maximum":%d,`+
					`"description":"How many seconds to count down."}},"required":["seconds"],"additionalProperties":false}`, maxCountdownSeconds)),
				Annotations: readOnlyAnnotations("Countdown"),
			},
			Handler: countdown(step),
		},
		{
			Tool: mcp.Tool{
				Name:         "time_now",
				Title:        "Current time",
				Description:  "Returns the current time in RFC 3339 format in an IANA time zone (default UTC), e.g. Europe/Berlin.",
				InputSchema:  []byte(`{"type":"object","properties":{"zone":{"type":"string","description":"IANA time zone name, e.g. America/New_York; default UTC."}},"additionalProperties":false}`),
				OutputSchema: []byte(`{"type":"object","properties":{"time":{"type":"string"},"zone":{"type":"string"}},"required":["time","zone"]}`),
				Annotations:  &mcp.ToolAnnotations{Title: "Current time", ReadOnlyHint: new(true), OpenWorldHint: new(false)},
			},
			Handler: timeNow(now),
		},
	}
}

// readOnlyAnnotations marks a pure function of its arguments.
func readOnlyAnnotations(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: new(true), IdempotentHint: new(true), OpenWorldHint: new(false)}
}

type textArgs struct {
	Text *string `json:"text"`
}

// bindText decodes {"text": string}, text being required.
func bindText(req *expertagent.CallRequest) (string, error) {
	var a textArgs
	if err := req.Bind(&a); err != nil {
		return "", err
	}
	if a.Text == nil {
		return "", fmt.Errorf("%w: field \"text\" is required", expertagent.ErrInvalidArguments)
	}
	return *a.Text, nil
}

func echo(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
	s, err := bindText(req)
	if err != nil {
		return nil, err
	}
	return mcp.TextResult(s), nil
}

// counts is word_count's structured result.
type counts struct {
	Words      int `json:"words"`
	Lines      int `json:"lines"`
	Characters int `json:"characters"`
	Bytes      int `json:"bytes"`
}

// countText counts like wc: lines are newline-terminated, except that a last
// line without a newline counts too.
func countText(s string) counts {
	c := counts{Words: len(strings.FieldsFunc(s, unicode.IsSpace)), Characters: utf8.RuneCountInString(s), Bytes: len(s)}
	c.Lines = strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		c.Lines++
	}
	return c
}

func wordCount(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
	s, err := bindText(req)
	if err != nil {
		return nil, err
	}
	c := countText(s)
	return &mcp.CallToolResult{
		Content: []mcp.Content{mcp.TextContent(fmt.Sprintf("%d words, %d lines, %d characters, %d bytes",
			c.Words, c.Lines, c.Characters, c.Bytes))},
		StructuredContent: c,
	}, nil
}

func sha256Tool(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
	s, err := bindText(req)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(s))
	digest := hex.EncodeToString(sum[:])
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.TextContent(digest)},
		StructuredContent: map[string]string{"sha256": digest},
	}, nil
}

// countdown waits seconds steps, sending progress after each one, and stops
// as soon as ctx ends (cancellation or deadline).
func countdown(step time.Duration) expertagent.ToolHandler {
	return func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
		var a struct {
			Seconds *int `json:"seconds"`
		}
		if err := req.Bind(&a); err != nil {
			return nil, err
		}
		if a.Seconds == nil {
			return nil, fmt.Errorf("%w: field \"seconds\" is required", expertagent.ErrInvalidArguments)
		}
		n := *a.Seconds
		if n < 1 || n > maxCountdownSeconds {
			return nil, fmt.Errorf("%w: field \"seconds\" must be between 1 and %d, got %d", expertagent.ErrInvalidArguments, maxCountdownSeconds, n)
		}
		t := time.NewTicker(step)
		defer t.Stop()
		for i := 1; i <= n; i++ {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("countdown stopped at %d of %d: %w", i-1, n, context.Cause(ctx))
			case <-t.C:
			}
			if err := req.Progress(ctx, float64(i), float64(n), fmt.Sprintf("%d of %d", i, n)); err != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("countdown: progress: %w", err)
			}
		}
		return mcp.TextResult(fmt.Sprintf("countdown of %d finished", n)), nil
	}
}

var errUnknownZone = errors.New("unknown time zone")

func timeNow(now func() time.Time) expertagent.ToolHandler {
	return func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
		var a struct {
			Zone string `json:"zone"`
		}
		if err := req.Bind(&a); err != nil {
			return nil, err
		}
		if a.Zone == "" {
			a.Zone = "UTC"
		}
		// time.LoadLocation also reads files: refuse anything that is not a zone name.
		if strings.Contains(a.Zone, "..") || strings.HasPrefix(a.Zone, "/") || a.Zone == "Local" {
			return nil, fmt.Errorf("%w %q: give an IANA name such as Europe/Berlin", errUnknownZone, a.Zone)
		}
		loc, err := time.LoadLocation(a.Zone)
		if err != nil {
			return nil, fmt.Errorf("%w %q: give an IANA name such as Europe/Berlin", errUnknownZone, a.Zone)
		}
		ts := now().In(loc).Format(time.RFC3339)
		return &mcp.CallToolResult{
			Content:           []mcp.Content{mcp.TextContent(ts)},
			StructuredContent: map[string]string{"time": ts, "zone": loc.String()},
		}, nil
	}
}
