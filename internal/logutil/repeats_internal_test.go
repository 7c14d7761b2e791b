package logutil

import (
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// Of a run of like lines for one key, Repeats writes the first and one
// summary with the count each window; a key that had nothing in a window
// is forgotten; keys past the bound are summed up together.
func TestRepeats(t *testing.T) {
	l, hook := test.NewNullLogger()
	r := NewRepeats(logrus.NewEntry(l), time.Hour, 2) // flushed by hand
	t.Cleanup(r.Close)
	line := func(key string) {
		r.Line(logrus.InfoLevel, "acl: denied", key, logrus.Fields{"client": key}, logrus.Fields{"client": key, "topic": "t"})
	}
	for range 1000 {
		line("c1")
	}
	line("c2")
	for range 5 {
		line("c3") // past the bound of 2 keys
	}
	if got := len(hook.AllEntries()); got != 2 {
		t.Fatalf("%d lines for 1000 of one key, 1 of another and 5 past the bound; want 2", got)
	}
	hook.Reset()
	r.flush()
	got := map[string]string{}
	for _, e := range hook.AllEntries() {
		k, _ := e.Data["client"].(string)
		if k == "" {
			k, _ = e.Data["keys"].(string)
		}
		got[k] = e.Message
	}
	want := map[string]string{"c1": "acl: denied ×999 in the last 1h0m0s", "others": "acl: denied ×5 in the last 1h0m0s"}
	if len(got) != len(want) || got["c1"] != want["c1"] || got["others"] != want["others"] {
		t.Errorf("summaries %q, want %q", got, want)
	}
	hook.Reset()
	r.flush() // c1 had nothing in this window: forgotten
	line("c1")
	if n := len(hook.AllEntries()); n != 1 || hook.LastEntry().Message != "acl: denied" {
		t.Errorf("after a quiet window: %d lines, want the line itself", n)
	}
	if len(r.keys) != 1 {
		t.Errorf("%d keys kept, want 1", len(r.keys))
	}
}
