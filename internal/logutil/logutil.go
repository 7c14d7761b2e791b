// Package logutil holds what every component does with the logger its
// options give it: a logger that writes nowhere when none was given (the
// documented default of every Options.Logger), with its component field.
package logutil

import (
	"io"

	"github.com/sirupsen/logrus"
)

// OrDiscard returns log, or, when it is nil, a logger that writes
// nothing. Its level is Panic, so that no line is even formatted.
func OrDiscard(log *logrus.Entry) *logrus.Entry {
	if log != nil {
		return log
	}
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.PanicLevel)
	return logrus.NewEntry(l)
}

// Component is OrDiscard(log) with the field component=name.
func Component(log *logrus.Entry, name string) *logrus.Entry {
	return OrDiscard(log).WithField("component", name)
}
