package store

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"modernc.org/sqlite"
)

var (
	// ErrStoreReadOnly is wrapped by the error of a write the store cannot
	// make because its database cannot be written: a read-only data
	// directory, database file or file system. Reads still work.
	ErrStoreReadOnly = errors.New("store is read-only")
	// ErrStoreFull is wrapped by the error of a write the store cannot make
	// because the disk (or the database's size limit) is full. Reads still
	// work.
	ErrStoreFull = errors.New("store is full")
)

// SQLite's primary result codes that mean the write cannot happen here
// (https://sqlite.org/rescode.html); extended codes carry them in the low byte.
const (
	sqliteBusy     = 5
	sqliteReadOnly = 8
	sqliteFull     = 13
)

// storeError is a write refused for a reason of the store itself: the
// sentinel for errors.Is, a hint for the operator, and the cause.
type storeError struct {
	sentinel error
	hint     string
	cause    error
}

func (e *storeError) Error() string {
	return fmt.Sprintf("%v (%s): %v", e.sentinel, e.hint, e.cause)
}

func (e *storeError) Unwrap() []error { return []error{e.sentinel, e.cause} }

// classifyWriteErr maps the failure of a write to ErrStoreReadOnly or
// ErrStoreFull when that is its cause, so that callers (the CLI, the admin
// API) can say what to fix instead of passing on "attempt to write a
// readonly database". Other errors are returned as they are.
func classifyWriteErr(err error) error {
	if err == nil || errors.Is(err, ErrStoreReadOnly) || errors.Is(err, ErrStoreFull) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteReadOnly:
			return &storeError{ErrStoreReadOnly, "the data directory or its database file cannot be written; reads still work", err}
		case sqliteFull:
			return &storeError{ErrStoreFull, "the disk holding the data directory is full; reads still work", err}
		}
		return err
	}
	if pe := classifyPgErr(err); pe != nil {
		return pe
	}
	switch {
	case errors.Is(err, syscall.EROFS), errors.Is(err, fs.ErrPermission):
		return &storeError{ErrStoreReadOnly, "the data directory or its database file cannot be written", err}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &storeError{ErrStoreFull, "the disk holding the data directory is full", err}
	}
	return err
}

// mapWriteErr applies classifyWriteErr to a write method's named error
// result: defer mapWriteErr(&err).
func mapWriteErr(err *error) { *err = classifyWriteErr(*err) }
