//go:build unix

package acl

import (
	"io/fs"
	"syscall"
)

// OwnerOf returns the owner and group of fi; ok is false where the system
// keeps none.
func OwnerOf(fi fs.FileInfo) (o FileOwner, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileOwner{}, false
	}
	return FileOwner{UID: int(st.Uid), GID: int(st.Gid)}, true
}
