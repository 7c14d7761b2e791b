//go:build linux

package agentcli

import "golang.org/x/sys/unix"

// Undumpable makes the process undumpable (prctl PR_SET_DUMPABLE 0): no
// core dump, and processes of the same user without CAP_SYS_PTRACE can
// neither attach to it nor read its /proc/<pid>/environ, mem, fd or
// maps. That is where the broker password of an agent started with
// TOOLBUS_AGENT_PASSWORD stays readable for the life of the process
// (os.Unsetenv does not change it), and a bridge's stdio server runs as
// the same user. The children it starts are dumpable again after their
// execve.
func Undumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
