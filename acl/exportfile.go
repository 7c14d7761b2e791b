package acl

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// FileOwner is the numeric owner and group of a file.
type FileOwner struct {
	UID, GID int
}

// WriteExportFile replaces path with data through a rename in its
// directory, so that a broker reloading meanwhile reads the old file or
// the new one, whole. An existing file keeps its permission bits and its
// owner: a broker that runs as another user than the export (Debian's
// Mosquitto runs as "mosquitto") still reads it after the next reload. A
// new file gets perm and the writer's owner. owner, when not nil, sets the
// owner (and group) of either.
//
// Keeping another user's owner needs the right to chown (root, as an
// export into /etc usually runs): without it the error says so, and the
// file is left as it was.
func WriteExportFile(path string, data []byte, perm fs.FileMode, owner *FileOwner) error {
	var want *FileOwner
	if fi, err := os.Stat(path); err == nil {
		perm = fi.Mode().Perm()
		if o, ok := OwnerOf(fi); ok {
			want = &o
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	if owner != nil {
		want = owner
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing is there
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if want != nil {
		if fi, err := tmp.Stat(); err != nil {
			tmp.Close()
			return fmt.Errorf("write %s: %w", path, err)
		} else if o, ok := OwnerOf(fi); !ok || o != *want {
			if err := tmp.Chown(want.UID, want.GID); err != nil {
				tmp.Close()
				return fmt.Errorf("write %s: cannot give it owner %d:%d (%w): run the export as root or as that user, "+
					"or choose the owner with --owner", path, want.UID, want.GID, err)
			}
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// ReadableBy reports whether a process of user uid, in the groups gids,
// may read a file with owner o and permission bits perm, as the kernel
// decides it: root reads anything; the owner by the owner's bits alone,
// a member of the group by the group's, anyone else by the others'.
func ReadableBy(o FileOwner, perm fs.FileMode, uid int, gids []int) bool {
	switch {
	case uid == 0:
		return true
	case uid == o.UID:
		return perm&0o400 != 0
	case slices.Contains(gids, o.GID):
		return perm&0o040 != 0
	}
	return perm&0o004 != 0
}
