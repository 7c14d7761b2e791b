package acl

import (
	"strings"
	"testing"
)

func TestNATSExport(t *testing.T) {
	hash := func(c string) string { return "$2a$04$" + strings.Repeat(c, 53) }
	ids := []Identity{
		{Username: "plat2", Role: RolePlatform},
		{Username: "agent1", Role: RoleExpertAgent},
		{Username: "plat1", Role: RolePlatform},
		{Username: "sensor", Role: RoleClient},
		{Username: "gone", Role: RoleExpertAgent, Disabled: true},
		{Username: "old", Role: RoleExpertAgent}, // password set before bcrypt hashes were kept
		{Username: "bad name", Role: RoleClient},
	}
	hashes := map[string]string{
		"plat1": hash("A"), "plat2": hash("B"), "agent1": hash("C"), "sensor": hash("D"),
		"gone": hash("E"), "bad name": hash("F"),
	}
	rules := []Rule{
		{ID: 1, Username: "sensor", Access: AccessWrite, Filter: "sensors/+/t"},
		{ID: 2, Access: AccessRead, Filter: "announcements/#"},
		{ID: 3, Username: "agent1", Access: AccessReadWrite, Filter: "agent1/scratch/#"},
		{ID: 4, Username: "gone", Access: AccessRead, Filter: "x/#"},
		{ID: 5, Username: "stranger", Access: AccessRead, Filter: "y/#"},
		{ID: 6, Access: AccessRead, Filter: "ff/v1/mcp/#"},
		{ID: 7, Access: AccessRead, Filter: "a.b/c"},
		{ID: 8, Access: AccessRead, Filter: "/leading"},
		{ID: 9, Access: AccessWrite, Filter: `q"uote`},
		{ID: 10, Username: "sensor", Access: AccessRead, Filter: "#"},
	}
	got := NATSExport(ids, hashes, rules)
	golden(t, "nats/"+NATSConfName, got.Conf)
	golden(t, "nats/skipped", []byte(strings.Join(got.Skipped, "\n")+"\n"))

	if strings.Contains(string(got.Conf), "ff.v1.") {
		t.Errorf("the accounts grant something under contract v1:\n%s", got.Conf)
	}
	// The output does not depend on the order of the identities.
	reversed := make([]Identity, len(ids))
	for i, id := range ids {
		reversed[len(ids)-1-i] = id
	}
	if again := NATSExport(reversed, hashes, rules); string(again.Conf) != string(got.Conf) {
		t.Error("the accounts depend on the order of the identities")
	}
}

func TestNATSSubjects(t *testing.T) {
	for _, tc := range []struct {
		filter string
		want   string // subjects joined by " "; "" = refused
	}{
		{"a/b", "a.b"},
		{"a/+/c", "a.*.c"},
		{"a/#", "a a.>"},
		{"#", ">"},
		{"+", "*"},
		{"$share/g/a/+", "$share.g.a.*"},
		{"a//b", ""},
		{"a/", ""},
		{"a.b", ""},
		{"a/b*", ""},
		{"a/>", ""},
		{"a b", ""},
		{`a\b`, ""},
	} {
		got, err := natsSubjects(tc.filter)
		if tc.want == "" {
			if err == nil {
				t.Errorf("natsSubjects(%q) = %v; want an error", tc.filter, got)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("natsSubjects(%q) = %v, %v; want %s", tc.filter, got, err, tc.want)
		}
	}
}
