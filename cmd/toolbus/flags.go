package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/config"
	"github.com/toolbus/toolbus/internal/envflag"
)

// newFlagSet returns a FlagSet for one command that writes its help to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, then fills every flag not given on the command line
// from its environment variable TOOLBUS_<FLAG> (dashes become underscores),
// then, for a command with a --config flag, from that file.
func parseFlags(fs *flag.FlagSet, args []string) error {
	_, err := parseCommandFlags(fs, args)
	return err
}

// flagSources says where each flag not left at its default got its value:
// "flag" (the command line), "env" or "file"; for one set by the file, the
// key "@" + name holds "PATH:LINE" (no flag name starts with '@').
type flagSources map[string]string

// located prefixes an error about a flag set by the config file with the
// file and line that set it (the error names the flag as --NAME), so that
// a value the flag accepted but the command refuses later (a rate limit, a
// log level) is found in the file as fast as one the flag refused.
func (s flagSources) located(err error) error {
	if err == nil {
		return nil
	}
	m := flagNameRE.FindStringSubmatch(err.Error())
	if m == nil || s["@"+m[1]] == "" {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), "--"+m[1]+": ")
	return &locatedError{text: s["@"+m[1]] + ": " + m[1] + ": " + msg, err: err}
}

// flagNameRE finds the flag an error is about.
var flagNameRE = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// locatedError is an error with the file and line of its setting in front.
type locatedError struct {
	text string
	err  error
}

func (e *locatedError) Error() string { return e.text }
func (e *locatedError) Unwrap() error { return e.err }

// explicit reports whether the command line or the environment set the
// flag: a config file read again later (SIGHUP) must not override it.
func (s flagSources) explicit(name string) bool { return s[name] == "flag" || s[name] == "env" }

// parseCommandFlags is parseFlags that also says where each value came from.
func parseCommandFlags(fs *flag.FlagSet, args []string) (flagSources, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	src := flagSources{}
	fs.Visit(func(f *flag.Flag) { src[f.Name] = "flag" })
	if err := envflag.Apply(fs, "TOOLBUS_", os.Getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		if src[f.Name] == "" {
			src[f.Name] = "env"
		}
	})
	if path := configPath(fs); path != "" {
		file, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		if err := file.Apply(fs, configFlag, checkConfigFlag); err != nil {
			return nil, err
		}
		fs.Visit(func(f *flag.Flag) {
			if src[f.Name] == "" {
				src[f.Name] = "file"
			}
		})
		for _, st := range file.Settings {
			if src[st.Key] == "file" {
				src["@"+st.Key] = fmt.Sprintf("%s:%d", file.Path, st.Line)
			}
		}
	}
	return src, nil
}

// effectiveSettings lists every flag of fs with its value and source;
// values of flags that hold secrets are masked.
func effectiveSettings(fs *flag.FlagSet, src flagSources) []admin.Setting {
	var out []admin.Setting
	fs.VisitAll(func(f *flag.Flag) {
		s := admin.Setting{Name: f.Name, Value: f.Value.String(), Source: src[f.Name]}
		if s.Source == "" {
			s.Source = "default"
		}
		if (strings.Contains(f.Name, "password") || strings.Contains(f.Name, "secret") || f.Name == "store-url") && s.Value != "" {
			s.Value = "********"
		}
		out = append(out, s)
	})
	return out
}

func configPath(fs *flag.FlagSet) string {
	if f := fs.Lookup(configFlag); f != nil {
		return f.Value.String()
	}
	return ""
}

// The flags of serve that read and check a config file.
const (
	configFlag      = "config"
	checkConfigFlag = "check-config"
)
