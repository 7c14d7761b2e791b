package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

var (
	// ErrInvalidRequest is returned for a request the model cannot carry
	// out as asked: a malformed body, an unknown role or access, a bad TTL,
	// a password too short. (Errors of the store's own checks wrap their
	// sentinel (package store, acl or contract) instead; both answer 400.)
	ErrInvalidRequest = errors.New("invalid request")
	// ErrBuiltinRule is returned when a built-in rule of the ff/v2/
	// tree is to be removed: they are granted by role and cannot change.
	ErrBuiltinRule = errors.New("built-in rule")
	// ErrNoBroker is returned by Clients when the process has no embedded
	// broker (it uses an external one, whose clients it cannot see).
	ErrNoBroker = errors.New("no embedded broker")
	// ErrNoServer is returned by what only a running server can answer
	// (clients, agents, contexts) when the Service works on a data
	// directory.
	ErrNoServer = errors.New("needs a running server")
	// ErrForbidden is the Client's error for a 403: the token lacks the
	// admin scope.
	ErrForbidden = errors.New("forbidden")
	// ErrUnauthenticated is the Client's error for a 401: no token, or a
	// bad, expired or revoked one.
	ErrUnauthenticated = errors.New("unauthenticated")
)

// Error codes of the JSON error body {"error": code, "message": text}.
const (
	codeInvalid         = "invalid_request"
	codeNotFound        = "not_found"
	codeConflict        = "conflict"
	codeBuiltin         = "builtin_rule"
	codeBusy            = "context_busy"
	codeNoBroker        = "no_embedded_broker"
	codeNoServer        = "no_server"
	codeStoreReadOnly   = "store_read_only"
	codeStoreFull       = "store_full"
	codeForbidden       = "forbidden"
	codeUnauthenticated = "unauthenticated"
	codeInternal        = "internal"
)

// APIError is an error answer of the admin API, as the Client returns it.
// errors.Is matches it against the sentinel its code stands for
// (store.ErrNotFound, store.ErrExists, ErrBuiltinRule, ErrForbidden, ...), so
// callers test both doors' errors the same way.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("admin API: HTTP %d %s", e.Status, e.Code)
	}
	return e.Message
}

// Unwrap maps the code back to its sentinel.
func (e *APIError) Unwrap() error {
	switch e.Code {
	case codeInvalid:
		return ErrInvalidRequest
	case codeNotFound:
		return store.ErrNotFound
	case codeConflict:
		return store.ErrExists
	case codeBuiltin:
		return ErrBuiltinRule
	case codeBusy:
		return requester.ErrContextBusy
	case codeNoBroker:
		return ErrNoBroker
	case codeNoServer:
		return ErrNoServer
	case codeStoreReadOnly:
		return store.ErrStoreReadOnly
	case codeStoreFull:
		return store.ErrStoreFull
	case codeForbidden:
		return ErrForbidden
	case codeUnauthenticated:
		return ErrUnauthenticated
	}
	return nil
}

// Status is the HTTP status the admin API answers err with, and whether
// err's text is for the operator (a refusal of the model: a bad request,
// an unknown name, a conflict) rather than an internal error whose text
// is logged only. The console shows the same messages as the API.
func Status(err error) (status int, public bool) {
	status, _ = errorStatus(err)
	return status, status != http.StatusInternalServerError
}

// errorStatus maps an error of the Service to its HTTP status and code.
// Unknown errors are internal (500): their text is logged, not sent.
func errorStatus(err error) (status int, code string) {
	switch {
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, store.ErrInvalidTokenSpec), errors.Is(err, acl.ErrInvalidRule),
		errors.Is(err, contract.ErrInvalidLevel), errors.Is(err, store.ErrInvalidPassword), errors.Is(err, store.ErrInvalidScope):
		return http.StatusBadRequest, codeInvalid
	case errors.Is(err, ErrBuiltinRule):
		return http.StatusForbidden, codeBuiltin
	case errors.Is(err, store.ErrNotFound), errors.Is(err, requester.ErrContextNotFound):
		return http.StatusNotFound, codeNotFound
	case errors.Is(err, store.ErrExists):
		return http.StatusConflict, codeConflict
	case errors.Is(err, requester.ErrContextBusy):
		return http.StatusConflict, codeBusy
	case errors.Is(err, ErrNoBroker):
		return http.StatusNotImplemented, codeNoBroker
	case errors.Is(err, ErrNoServer):
		return http.StatusNotImplemented, codeNoServer
	// A write the store cannot make: its message names what to fix (a
	// read-only data directory, a standby, a full disk), so it is sent.
	case errors.Is(err, store.ErrStoreReadOnly):
		return http.StatusServiceUnavailable, codeStoreReadOnly
	case errors.Is(err, store.ErrStoreFull):
		return http.StatusInsufficientStorage, codeStoreFull
	}
	return http.StatusInternalServerError, codeInternal
}
