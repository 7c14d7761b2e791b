package admin

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// TestErrorStatusRoundTrip: each sentinel the Service wraps answers its
// status and code, and the Client's APIError for that code matches the
// sentinel again with errors.Is.
func TestErrorStatusRoundTrip(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{store.ErrNotFound, http.StatusNotFound, codeNotFound},
		{store.ErrExists, http.StatusConflict, codeConflict},
		{ErrInvalidRequest, http.StatusBadRequest, codeInvalid},
		{ErrBuiltinRule, http.StatusForbidden, codeBuiltin},
		{requester.ErrContextBusy, http.StatusConflict, codeBusy},
		{ErrNoBroker, http.StatusNotImplemented, codeNoBroker},
		{ErrNoServer, http.StatusNotImplemented, codeNoServer},
		{store.ErrStoreReadOnly, http.StatusServiceUnavailable, codeStoreReadOnly},
		{store.ErrStoreFull, http.StatusInsufficientStorage, codeStoreFull},
	} {
		t.Run(c.code, func(t *testing.T) {
			wrapped := fmt.Errorf("add identity: %w", c.err)
			status, code := errorStatus(wrapped)
			if status != c.status || code != c.code {
				t.Fatalf("errorStatus(%v) = %d %s, want %d %s", wrapped, status, code, c.status, c.code)
			}
			if back := (&APIError{Status: status, Code: code}); !errors.Is(back, c.err) {
				t.Errorf("APIError code %s does not match %v", code, c.err)
			}
		})
	}
	if status, code := errorStatus(errors.New("disk on fire")); status != http.StatusInternalServerError || code != codeInternal {
		t.Errorf("unknown error = %d %s, want 500 internal", status, code)
	}
}
