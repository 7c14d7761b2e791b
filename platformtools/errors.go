package platformtools

import "errors"

var (
	// ErrUnknownTool is returned by Registry.Call for a tool that is not
	// registered or that the caller's token may not see (a tool scope it
	// lacks). The gateway answers it with JSON-RPC -32602.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrForbidden is returned by Registry.Call when the caller may see the
	// tool but not call it: no tools:call scope, a read-only token and a tool
	// not annotated readOnlyHint, or an entity outside the token's narrowing.
	ErrForbidden = errors.New("forbidden")
	// ErrInvalidTool is returned by Registry.Add for a tool that cannot be
	// registered: bad or duplicate name, no handler, bad scope, or a schema
	// that does not compile.
	ErrInvalidTool = errors.New("invalid tool")
	// ErrNoInjector is returned by Call.Inject on a Call that is not being run
	// by a Registry, which is what supplies the REST handler.
	ErrNoInjector = errors.New("no REST handler to inject into")
	// ErrResponseTooLarge is returned by Call.Inject when the injected
	// response body exceeds Options.MaxInjectResponse.
	ErrResponseTooLarge = errors.New("injected response too large")
	// ErrHandlerPanic is returned by Call.Inject when the REST handler
	// panicked while serving the injected request.
	ErrHandlerPanic = errors.New("REST handler panicked")
)
