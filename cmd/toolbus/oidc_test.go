package main

import (
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
