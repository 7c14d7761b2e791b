package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/expertagent"
)

func TestExtraTools(t *testing.T) {
	got := extraTools(12)
	if len(got) != 12 || got[0].Name != "tool_0001" || got[11].Name != "tool_0012" {
		t.Fatalf("names: %d tools, first %q", len(got), got[0].Name)
	}
	// They fit beside the real tools in one agent: valid, no clash.
	a := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1", Username: "u"})
	for _, tool := range append(tools(time.Second, time.Now), got...) {
		if err := a.AddTool(tool); err != nil {
			t.Fatalf("AddTool %s: %v", tool.Name, err)
		}
	}
	res, err := got[6].Handler(context.Background(), &expertagent.CallRequest{Name: got[6].Name})
	if err != nil {
		t.Fatal(err)
	}
	if text := resultText(t, res); text != "tool_0007" {
		t.Errorf("tool_0007 answered %q", text)
	}
	if len(extraTools(0)) != 0 {
		t.Error("extraTools(0) is not empty")
	}
}

func TestParseFlagsExtraTools(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    int
		wantErr string
	}{
		{nil, 0, ""},
		{[]string{"--extra-tools", "995"}, 995, ""},
		{[]string{"--extra-tools", "-1"}, 0, "--extra-tools"},
		{[]string{"--extra-tools", "10000"}, 0, "--extra-tools"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseFlags(tc.args, withUsername(nil), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c.extraTools != tc.want {
				t.Fatalf("extraTools = %d, err %v; want %d", c.extraTools, err, tc.want)
			}
		})
	}
}

func TestParseFlagsTools(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    []string // the tools served
		wantErr string
	}{
		{"", toolNames(), ""},
		{"echo,sha256", []string{"echo", "sha256"}, ""},
		{" sha256 , echo ", []string{"echo", "sha256"}, ""}, // served in the reference order
		{"time_now", []string{"time_now"}, ""},
		{"echo,nope", nil, `no tool "nope"; the tools are echo, word_count`},
		{"echo,echo", nil, "listed twice"},
		{"echo,", nil, `no tool ""`},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			c, err := parseFlags([]string{"--tools", tc.arg}, withUsername(nil), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tool := range selectTools(tools(time.Second, time.Now), c.only) {
				got = append(got, tool.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("served %v, want %v", got, tc.want)
			}
		})
	}
	// The environment works as for every flag.
	c, err := parseFlags(nil, withUsername(map[string]string{"TOOLBUS_AGENT_TOOLS": "countdown"}), io.Discard)
	if err != nil || strings.Join(c.only, ",") != "countdown" {
		t.Errorf("TOOLBUS_AGENT_TOOLS=countdown: only %v, err %v", c.only, err)
	}
}
