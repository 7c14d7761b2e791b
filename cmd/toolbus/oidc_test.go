package main

import (
	"fmt"
	"reflect"
	"testing"
)

func TestParseGroupScopes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string][]string
		wantErr bool
	}{
		{"", nil, false},
		{"mcp-users=tools:list,tools:call;auditors=tools:list", map[string][]string{"mcp-users": {"tools:list", "tools:call"}, "auditors": {"tools:list"}}, false},
		{" a = tools:list ; ", map[string][]string{"a": {"tools:list"}}, false},
		{"no-equals", nil, true},
		{"=tools:list", nil, true},
		{"a=Tools List", nil, true},
	} {
		got, err := parseGroupScopes(tc.in)
		if (err != nil) != tc.wantErr || !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseGroupScopes(%q) = %v, %v; want %v (error %t)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := parsePrefixes("10.0.0.0/8, 192.168.1.7,::1, 2001:db8::/32")
	if err != nil || fmt.Sprint(got) != "[10.0.0.0/8 192.168.1.7/32 ::1/128 2001:db8::/32]" {
		t.Fatalf("parsePrefixes = %v, %v", got, err)
	}
	if _, err := parsePrefixes("proxy.example"); err == nil {
		t.Fatal("a host name was accepted")
	}
	if got, err := parsePrefixes(""); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
}
