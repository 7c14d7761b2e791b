package logutil

import (
	"bytes"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestOrDiscard(t *testing.T) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	given := logrus.NewEntry(l)
	if OrDiscard(given) != given {
		t.Fatal("a given logger was replaced")
	}
	Component(given, "x").Info("hello")
	if !bytes.Contains(buf.Bytes(), []byte("component=x")) {
		t.Fatalf("Component wrote %q, want the component field", buf.String())
	}
	d := OrDiscard(nil)
	if d == nil || d.Logger.IsLevelEnabled(logrus.ErrorLevel) {
		t.Fatal("the default logger is nil or formats lines nobody reads")
	}
	Component(nil, "y").Error("nowhere") // must not panic
}
