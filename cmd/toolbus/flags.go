package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/toolbus/toolbus/internal/envflag"
)

// newFlagSet returns a FlagSet for one command that writes its help to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, then fills every flag not given on the command line
// from its environment variable TOOLBUS_<FLAG> (dashes become underscores).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := envflag.Apply(fs, "TOOLBUS_", os.Getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
