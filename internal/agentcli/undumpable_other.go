//go:build !linux

package agentcli

// Undumpable does nothing here: PR_SET_DUMPABLE is Linux's. Elsewhere,
// run the agent as a user of its own to keep its environment from other
// processes.
func Undumpable() error { return nil }
