package acl

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestMosquittoExport(t *testing.T) {
	// Fixed hashes: 12-byte salt, 64-byte key, as Mosquitto 2.0 reads them.
	hash := func(c string) string {
		return encodeHash(1000, bytes.Repeat([]byte(c), saltLen), bytes.Repeat([]byte(c), hashLen))
	}
	ids := []Identity{
		{Username: "plat2", Role: RolePlatform},
		{Username: "agent1", Role: RoleExpertAgent},
		{Username: "plat1", Role: RolePlatform},
		{Username: "sensor", Role: RoleClient},
		{Username: "gone", Role: RoleExpertAgent, Disabled: true},
		{Username: "nohash", Role: RoleClient},
		{Username: "bad name", Role: RoleClient},
	}
	hashes := map[string]string{
		"plat1": hash("A"), "plat2": hash("B"), "agent1": hash("C"), "sensor": hash("D"),
		"gone": hash("E"), "nohash": "plain-text", "bad name": hash("F"),
	}
	rules := []Rule{
		{ID: 1, Username: "sensor", Access: AccessWrite, Filter: "sensors/%c/t"},
		{ID: 2, Access: AccessRead, Filter: "announcements/#"},
		{ID: 3, Username: "agent1", Access: AccessReadWrite, Filter: "agent1/scratch/#"},
		{ID: 4, Username: "gone", Access: AccessRead, Filter: "x/#"},
		{ID: 5, Username: "stranger", Access: AccessRead, Filter: "y/#"},
		{ID: 6, Access: AccessRead, Filter: "ff/v1/mcp/#"},
		{ID: 7, Access: AccessRead, Filter: "a b/c"},
		{ID: 8, Access: AccessWrite, Filter: "x\ntopic readwrite all"},
		{ID: 9, Username: "sensor", Access: AccessReadWrite, Filter: "ff/v2/mcp/sensor/+/status"},
		{ID: 10, Access: AccessRead, Filter: "ff/+/probe/#"},
	}
	got := MosquittoExport(ids, hashes, rules)
	golden(t, "mosquitto/passwords", got.Passwords)
	golden(t, "mosquitto/acl", got.ACL)
	golden(t, "mosquitto/skipped", []byte(strings.Join(got.Skipped, "\n")+"\n"))

	// A pattern applies to every user: one would let the client identity
	// act as an agent under its own name.
	for line := range strings.Lines(string(got.ACL)) {
		if strings.HasPrefix(line, "pattern") {
			t.Errorf("acl has a pattern line: %q", line)
		}
	}
	if strings.Contains(string(got.ACL), "ff/v1/") {
		t.Errorf("acl grants something under contract v1:\n%s", got.ACL)
	}

	// The output does not depend on the order of the identities.
	reversed := make([]Identity, len(ids))
	for i, id := range ids {
		reversed[len(ids)-1-i] = id
	}
	if again := MosquittoExport(reversed, hashes, rules); string(again.ACL) != string(got.ACL) || string(again.Passwords) != string(got.Passwords) {
		t.Error("the output depends on the order of the identities")
	}
}

func TestMosquittoExportEmpty(t *testing.T) {
	got := MosquittoExport(nil, nil, nil)
	if len(got.Passwords) != 0 || len(got.Skipped) != 0 {
		t.Fatalf("empty export: %+v", got)
	}
	if strings.Contains(string(got.ACL), "\nuser ") || strings.Contains(string(got.ACL), "\ntopic ") ||
		strings.Contains(string(got.ACL), "\npattern ") {
		t.Fatalf("acl grants something with no identities:\n%s", got.ACL)
	}
}

func TestMosquittoConf(t *testing.T) {
	golden(t, "mosquitto/toolbus.conf", MosquittoConf("/etc/mosquitto/toolbus"))
}
