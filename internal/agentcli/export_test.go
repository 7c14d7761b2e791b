package agentcli

import "io"

// SetStdout points --version's output at w until the test ends.
func SetStdout(w io.Writer) (restore func()) {
	old := stdout
	stdout = w
	return func() { stdout = old }
}
