package acl

import (
	"io/fs"
	"testing"
)

// ReadableBy decides as the kernel does: the owner by the owner's bits
// alone, a group member by the group's, anyone else by the others'; root
// reads anything.
func TestReadableBy(t *testing.T) {
	o := FileOwner{UID: 1000, GID: 100}
	for _, tc := range []struct {
		name string
		perm fs.FileMode
		uid  int
		gids []int
		want bool
	}{
		{"owner 0600", 0o600, 1000, nil, true},
		{"owner without owner bits, group bits set", 0o040, 1000, []int{100}, false},
		{"group member 0640", 0o640, 2000, []int{5, 100}, true},
		{"group member 0600", 0o600, 2000, []int{100}, false},
		{"another user 0644", 0o644, 2000, nil, true},
		{"another user 0640", 0o640, 2000, []int{5}, false},
		{"root 0000", 0, 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadableBy(o, tc.perm, tc.uid, tc.gids); got != tc.want {
				t.Errorf("ReadableBy(%v, %#o, %d, %v) = %t, want %t", o, tc.perm, tc.uid, tc.gids, got, tc.want)
			}
		})
	}
}
