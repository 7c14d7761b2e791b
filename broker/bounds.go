package broker

import "github.com/toolbus/toolbus/internal/clip"

// maxField bounds every string a client chose (username, client ID,
// topic, filter, and error text that may quote them) in a log line or an
// Event. MQTT lets each be up to 64 KiB, and each refusal would otherwise
// write them whole.
const maxField = 256

// cut returns s if it fits in maxField bytes, else its first bytes (on a
// rune boundary) and how many were left out.
func cut(s string) string { return clip.Counted(s, maxField) }

// cutError is an error whose text was too long for a log line or an
// Event: Error says it cut, errors.Is and As still see the original.
type cutError struct{ err error }

func (e cutError) Error() string { return cut(e.err.Error()) }
func (e cutError) Unwrap() error { return e.err }

// cutErr returns err, or err with its text cut when it is longer than
// maxField.
func cutErr(err error) error {
	if err == nil || len(err.Error()) <= maxField {
		return err
	}
	return cutError{err}
}
