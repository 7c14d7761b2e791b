package broker

import "errors"

var (
	// ErrInvalidOptions is returned by New when Options are incomplete or
	// contradictory.
	ErrInvalidOptions = errors.New("invalid broker options")
	// ErrNotStarted is returned by Ready before Start has succeeded.
	ErrNotStarted = errors.New("broker not started")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("broker already started")
	// ErrClosed is returned by Start, Ready and the InlineBus once the
	// broker has been closed.
	ErrClosed = errors.New("broker closed")
	// ErrInvalidTopic is returned by InlineBus.Publish for a topic name that
	// cannot be published to: empty, with a wildcard, or starting with '$'.
	ErrInvalidTopic = errors.New("invalid topic name")
	// ErrInvalidFilter is returned by InlineBus.Subscribe and Unsubscribe
	// for a malformed topic filter, or a shared ("$share/...") one, which
	// the inline client cannot hold.
	ErrInvalidFilter = errors.New("invalid topic filter")
)
