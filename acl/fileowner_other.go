//go:build !unix

package acl

import "io/fs"

// OwnerOf returns the owner and group of fi; ok is false where the system
// keeps none, as here.
func OwnerOf(fs.FileInfo) (FileOwner, bool) { return FileOwner{}, false }
