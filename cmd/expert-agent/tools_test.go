package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

var fixedNow = time.Date(2025, 11, 25, 12, 30, 0, 0, time.UTC)

// callTool runs the named tool's handler directly, without a broker.
func callTool(t *testing.T, ctx context.Context, step time.Duration, name, args string) (*mcp.CallToolResult, error) {
	t.Helper()
	for _, tool := range tools(step, func() time.Time { return fixedNow }) {
		if tool.Name == name {
			return tool.Handler(ctx, &expertagent.CallRequest{Name: name, Arguments: json.RawMessage(args)})
		}
	}
	t.Fatalf("no tool %q", name)
	return nil, nil
}

func resultText(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	if r == nil || len(r.Content) != 1 || r.Content[0].Type != mcp.ContentText {
		t.Fatalf("result %+v: want one text content", r)
	}
	return r.Content[0].Text
}

func TestToolHandlers(t *testing.T) {
	tests := []struct {
		name, tool, args string
		wantText         string // exact text of the single content, if no error
		wantStructured   string // JSON of StructuredContent, if set
		wantErr          string // substring of the error
		wantInvalidArgs  bool   // error wraps expertagent.ErrInvalidArguments
	}{
		{name: "echo", tool: "echo", args: `{"text":"hello, world"}`, wantText: "hello, world"},
		{name: "echo empty text", tool: "echo", args: `{"text":""}`, wantText: ""},
		{name: "echo unicode", tool: "echo", args: `{"text":"grüß dich 👋"}`, wantText: "grüß dich 👋"},
		{name: "echo missing text", tool: "echo", args: `{}`, wantErr: `"text" is required`, wantInvalidArgs: true},
		{name: "echo no arguments", tool: "echo", args: ``, wantErr: `"text" is required`, wantInvalidArgs: true},
		{name: "echo unknown field", tool: "echo", args: `{"text":"a","loud":true}`, wantErr: `unknown field "loud"`, wantInvalidArgs: true},
		{name: "echo wrong type", tool: "echo", args: `{"text":42}`, wantErr: `field "text": want string, got number`, wantInvalidArgs: true},

		{name: "word_count", tool: "word_count", args: `{"text":"one two  three\nfour\n"}`,
			wantText: "4 words, 2 lines, 20 characters, 20 bytes", wantStructured: `{"words":4,"lines":2,"characters":20,"bytes":20}`},
		{name: "word_count no final newline", tool: "word_count", args: `{"text":"a\nb"}`,
			wantText: "2 words, 2 lines, 3 characters, 3 bytes", wantStructured: `{"words":2,"lines":2,"characters":3,"bytes":3}`},
		{name: "word_count empty", tool: "word_count", args: `{"text":""}`,
			wantText: "0 words, 0 lines, 0 characters, 0 bytes", wantStructured: `{"words":0,"lines":0,"characters":0,"bytes":0}`},
		{name: "word_count runes", tool: "word_count", args: `{"text":"héllo wörld"}`,
			wantText: "2 words, 1 lines, 11 characters, 13 bytes", wantStructured: `{"words":2,"lines":1,"characters":11,"bytes":13}`},
		{name: "word_count missing text", tool: "word_count", args: `{"txt":"a"}`, wantErr: `unknown field "txt"`, wantInvalidArgs: true},

		{name: "sha256 empty", tool: "sha256", args: `{"text":""}`,
			wantText:       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			wantStructured: `{"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`},
		{name: "sha256 abc", tool: "sha256", args: `{"text":"abc"}`,
			wantText:       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
			wantStructured: `{"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}`},
		{name: "sha256 wrong type", tool: "sha256", args: `{"text":["a"]}`, wantErr: `field "text"`, wantInvalidArgs: true},

		{name: "countdown", tool: "countdown", args: `{"seconds":3}`, wantText: "countdown of 3 finished"},
		{name: "countdown zero", tool: "countdown", args: `{"seconds":0}`, wantErr: "between 1 and 300", wantInvalidArgs: true},
		{name: "countdown too long", tool: "countdown", args: `{"seconds":301}`, wantErr: "between 1 and 300", wantInvalidArgs: true},
		{name: "countdown missing", tool: "countdown", args: `{}`, wantErr: `"seconds" is required`, wantInvalidArgs: true},
		{name: "countdown fraction", tool: "countdown", args: `{"seconds":1.5}`, wantErr: `field "seconds"`, wantInvalidArgs: true},

		{name: "time_now default UTC", tool: "time_now", args: `{}`,
			wantText: "2025-11-25T12:30:00Z", wantStructured: `{"time":"2025-11-25T12:30:00Z","zone":"UTC"}`},
		{name: "time_now Berlin", tool: "time_now", args: `{"zone":"Europe/Berlin"}`,
			wantText: "2025-11-25T13:30:00+01:00", wantStructured: `{"time":"2025-11-25T13:30:00+01:00","zone":"Europe/Berlin"}`},
		{name: "time_now New York", tool: "time_now", args: `{"zone":"America/New_York"}`,
			wantText: "2025-11-25T07:30:00-05:00", wantStructured: `{"time":"2025-11-25T07:30:00-05:00","zone":"America/New_York"}`},
		{name: "time_now unknown zone", tool: "time_now", args: `{"zone":"Mars/Olympus_Mons"}`, wantErr: "unknown time zone"},
		{name: "time_now path", tool: "time_now", args: `{"zone":"../../etc/passwd"}`, wantErr: "unknown time zone"},
		{name: "time_now Local refused", tool: "time_now", args: `{"zone":"Local"}`, wantErr: "unknown time zone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			res, err := callTool(t, ctx, time.Millisecond, tc.tool, tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if got := errors.Is(err, expertagent.ErrInvalidArguments); got != tc.wantInvalidArgs {
					t.Fatalf("errors.Is(%v, ErrInvalidArguments) = %v, want %v", err, got, tc.wantInvalidArgs)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if got := resultText(t, res); got != tc.wantText {
				t.Errorf("text = %q, want %q", got, tc.wantText)
			}
			if res.IsError {
				t.Errorf("IsError set")
			}
			if tc.wantStructured != "" {
				got, err := json.Marshal(res.StructuredContent)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != tc.wantStructured {
					t.Errorf("structured = %s, want %s", got, tc.wantStructured)
				}
			}
		})
	}
}

func TestCountdownHonoursCancellation(t *testing.T) {
	tests := []struct {
		name   string
		ctx    func(t *testing.T) context.Context
		reason error
	}{
		{name: "cancelled", reason: context.Canceled, ctx: func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}},
		{name: "deadline", reason: context.DeadlineExceeded, ctx: func(t *testing.T) context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// An hour per step: only the context can end this call.
			_, err := callTool(t, tc.ctx(t), time.Hour, "countdown", `{"seconds":5}`)
			if !errors.Is(err, tc.reason) {
				t.Fatalf("error = %v, want %v", err, tc.reason)
			}
			if !strings.Contains(err.Error(), "stopped at 0 of 5") {
				t.Errorf("error %q does not say where it stopped", err)
			}
		})
	}
}

func TestToolsAreValid(t *testing.T) {
	agent := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1"})
	seen := map[string]bool{}
	for _, tool := range tools(time.Second, time.Now) {
		if err := agent.AddTool(tool); err != nil {
			t.Errorf("AddTool(%s): %v", tool.Name, err)
		}
		if !json.Valid(tool.InputSchema) || (tool.OutputSchema != nil && !json.Valid(tool.OutputSchema)) {
			t.Errorf("%s: schema is not valid JSON", tool.Name)
		}
		if tool.Annotations == nil || tool.Annotations.ReadOnlyHint == nil || !*tool.Annotations.ReadOnlyHint {
			t.Errorf("%s: every reference tool is read-only and must say so", tool.Name)
		}
		seen[tool.Name] = true
	}
	for _, name := range []string{"echo", "word_count", "sha256", "countdown", "time_now"} {
		if !seen[name] {
			t.Errorf("tool %s missing", name)
		}
	}
}
