package main

import (
	"flag"
	"fmt"
	"io"
	"os"

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

// parseCommandFlags is parseFlags that also returns the flags the command
// line and the environment set: a config file read again later (SIGHUP)
// must not override those.
func parseCommandFlags(fs *flag.FlagSet, args []string) (map[string]bool, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := envflag.Apply(fs, "TOOLBUS_", os.Getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if path := configPath(fs); path != "" {
		file, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		if err := file.Apply(fs, configFlag, checkConfigFlag); err != nil {
			return nil, err
		}
	}
	return explicit, nil
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
