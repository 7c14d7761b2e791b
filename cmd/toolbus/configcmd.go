package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

const configUsage = `usage: toolbus config check FILE

Checks FILE as serve's --config would read it, together with the TOOLBUS_*
environment: every key must be a flag of serve with a valid value. Prints
"settings ok", or the file, line and setting at fault.
`

// runConfig serves "toolbus config check FILE": serve's own parsing and
// checks, without starting anything.
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stderr, configUsage)
		return flag.ErrHelp
	}
	if len(args) != 2 || args[0] != "check" {
		return fmt.Errorf("want: toolbus config check FILE (one file)")
	}
	return runServe(ctx, []string{"--" + configFlag, args[1], "--" + checkConfigFlag}, stdout, stderr)
}
