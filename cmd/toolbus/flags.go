package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/config"
	"github.com/toolbus/toolbus/internal/envflag"
	"github.com/toolbus/toolbus/server"
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
	if err := envflag.Parse(fs, args); err != nil {
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
		switch {
		case s.Value == "":
		case strings.Contains(f.Name, "password") || strings.Contains(f.Name, "secret") || f.Name == "store-url":
			s.Value = "********"
		case f.Name == "broker-url": // mqtt://user:pass@host: the credentials go
			s.Value = server.RedactURL(s.Value)
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

// checkCommand checks the command words at the head of args (`token
// create`) against the commands the usage lists, before anything runs: a
// typo is one line naming the nearest command, as git's "did you mean",
// not the usage. Flags, and words after a whole command (its arguments),
// are left to the command.
func checkCommand(args []string) error {
	paths := commandPaths()
	var at []string
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			if i == 0 && !slices.Contains([]string{"-h", "-help", "--help", "-version", "--version"}, a) {
				return fmt.Errorf("%s before the command: flags come after it, toolbus <command> [flags] ('toolbus --help' lists the commands)", a)
			}
			return nil
		}
		next := nextWords(paths, at)
		if len(next) == 0 {
			return nil // a whole command: the rest are its arguments
		}
		if slices.Contains(next, a) {
			at = append(at, a)
			continue
		}
		near := envflag.Suggest(a, next)
		switch {
		case len(at) == 0 && near != "":
			return fmt.Errorf("unknown command %q; did you mean %q?", a, near)
		case len(at) == 0:
			return fmt.Errorf("unknown command %q ('toolbus --help' lists the commands)", a)
		case slices.ContainsFunc(paths, func(p []string) bool { return slices.Equal(p, at) }):
			// `agents` runs alone too: a word after it that is no
			// subcommand is its own to refuse, unless it is a typo of one.
			if near == "" {
				return nil
			}
			fallthrough
		case near != "":
			return fmt.Errorf("%s: unknown subcommand %q; did you mean %q?", strings.Join(at, " "), a, near)
		default:
			return fmt.Errorf("%s: unknown subcommand %q (want %s)", strings.Join(at, " "), a, orList(next))
		}
	}
	return nil
}

// commandPaths are the commands the usage lists, as words (`acl rule
// add`), with the spellings it does not list that dispatch takes too.
func commandPaths() [][]string {
	paths := [][]string{{"help"}, {"agents", "list"}, {"clients", "list"}}
	for _, line := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		words, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		var path []string
		for _, w := range strings.Fields(words) {
			if w != strings.ToUpper(w) { // FILE and the like are arguments
				path = append(path, w)
			}
		}
		paths = append(paths, path)
	}
	return paths
}

// nextWords are the words that may follow at in paths, in usage order.
func nextWords(paths [][]string, at []string) []string {
	var next []string
	for _, p := range paths {
		if len(p) > len(at) && slices.Equal(p[:len(at)], at) && !slices.Contains(next, p[len(at)]) {
			next = append(next, p[len(at)])
		}
	}
	return next
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
