package platformtools

import "github.com/toolbus/toolbus/internal/jsonenc"

// appendString appends s as a JSON string, as encoding/json writes it
// except that <, > and & are not escaped: the output is never embedded in
// HTML.
func appendString(b []byte, s string) []byte { return jsonenc.AppendString(b, s, false) }
