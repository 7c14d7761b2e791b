package debpkg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFindPresent(t *testing.T) {
	got, skip, err := Find("no-such-package", func() string { return "/bin/true" }, time.Second)
	if got != "/bin/true" || skip || err != nil {
		t.Fatalf("Find = %q, %v, %v; want the path look found, without installing", got, skip, err)
	}
}

// TestFlockWaitsAndGivesUp: a second lock on the file waits for the first
// and gives up when its context ends.
func TestFlockWaitsAndGivesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	first, second := open(), open()
	if err := flock(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := flock(ctx, second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while the first holds: %v, want DeadlineExceeded", err)
	}
	first.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := flock(ctx2, second); err != nil {
		t.Fatalf("second lock after the first closed: %v", err)
	}
}
