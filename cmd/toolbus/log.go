package main

import (
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
)

func newLogger(level, format string, out io.Writer) (*logrus.Entry, error) {
	l := logrus.New()
	l.Out = out
	lv, err := parseLogLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l.SetLevel(lv)
	switch format {
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{})
	case "text":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	default:
		return nil, fmt.Errorf("--log-format: %q is neither json nor text", format)
	}
	return logrus.NewEntry(l).WithField("app", "toolbus"), nil
}

// parseLogLevel reads a --log-level value: the levels the flag's help
// names (logrus takes a few more, which it may keep taking).
func parseLogLevel(s string) (logrus.Level, error) {
	lv, err := logrus.ParseLevel(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a log level: want debug, info, warn or error", s)
	}
	return lv, nil
}
