package bridge

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// An HTTP upstream's URL may carry credentials: user info, a key in its
// path (https://host/s/<key>/mcp) or in its query (?api_key=...). Errors
// name the URL (net/http's *url.Error holds it with its query; the go-sdk
// quotes it), and the bridge logs them and hands them to callers; so every
// error that may hold the URL goes through redact, which puts upstreamName
// (scheme and host only) in its place.

// redactedQueryValue stands for a secret removed from a text.
const redactedQueryValue = "REDACTED"

// minRedacted is the shortest path, query value or password redact looks for
// on its own: shorter ones (a page number, "1") would mangle the text
// around them, and appear in it whole only within the URL anyway.
const minRedacted = 3

// redactor replaces an upstream URL and its secrets in texts.
type redactor struct {
	r *strings.Replacer // nil: nothing to redact
}

// newRedactor returns the redactor of rawURL, named name in the texts.
func newRedactor(rawURL, name string) redactor {
	if rawURL == "" {
		return redactor{}
	}
	var forms, secrets []string
	forms = append(forms, rawURL)
	u, err := url.Parse(rawURL)
	if err == nil {
		forms = append(forms, u.String(), u.Redacted())
		if u.User != nil {
			forms = append(forms, strings.Replace(u.String(), u.User.String()+"@", "", 1))
			secrets = append(secrets, u.User.String()+"@")
			if p, ok := u.User.Password(); ok {
				// net/http's *url.Error shows the password as ***.
				user, _, _ := strings.Cut(u.User.String(), ":")
				forms = append(forms, strings.Replace(u.String(), u.User.String()+"@", user+":***@", 1))
				secrets = append(secrets, user+":***@")
				if len(p) >= minRedacted {
					secrets = append(secrets, p, url.QueryEscape(p))
				}
			}
		}
		// The path alone, should a text quote it without the host: a key
		// in one of its segments cannot be told from the other segments.
		if u.Path != "/" && len(u.Path) >= minRedacted {
			secrets = append(secrets, u.Path, u.EscapedPath())
		}
		if u.RawQuery != "" {
			secrets = append(secrets, u.RawQuery)
			for _, vs := range u.Query() {
				for _, v := range vs {
					if len(v) >= minRedacted {
						secrets = append(secrets, v, url.QueryEscape(v))
					}
				}
			}
		}
	}
	// Longest first: a URL is replaced whole before its parts.
	var pairs []string
	seen := map[string]bool{}
	add := func(old, new string) {
		if old != "" && !seen[old] {
			seen[old] = true
			pairs = append(pairs, old, new)
		}
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		add(f, name)
	}
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		add(s, redactedQueryValue)
	}
	return redactor{r: strings.NewReplacer(pairs...)}
}

// text returns s without the URL's secrets.
func (r redactor) text(s string) string {
	if r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// json returns the JSON value raw with the URL's secrets taken out of its
// strings and member names; raw as it is if it holds none, nil if it is
// not JSON. (Replacing in raw's bytes would miss a secret the upstream
// wrote with escapes, \u0026 or \/.)
func (r redactor) json(raw json.RawMessage) json.RawMessage {
	if r.r == nil || len(raw) == 0 {
		return raw
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers kept as written
	var v any
	if err := d.Decode(&v); err != nil {
		return nil
	}
	v, changed := r.value(v)
	if !changed {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return out
}

// value is v, a decoded JSON value, with the URL's secrets taken out of
// its strings, and whether it changed.
func (r redactor) value(v any) (any, bool) {
	switch v := v.(type) {
	case string:
		s := r.text(v)
		return s, s != v
	case []any:
		changed := false
		for i, e := range v {
			var c bool
			v[i], c = r.value(e)
			changed = changed || c
		}
		return v, changed
	case map[string]any:
		out := make(map[string]any, len(v))
		changed := false
		for k, e := range v {
			e, c := r.value(e)
			rk := r.text(k)
			out[rk] = e
			changed = changed || c || rk != k
		}
		return out, changed
	}
	return v, false
}

// err returns err with a message without the URL's secrets; it still
// unwraps to err, for errors.Is.
func (r redactor) err(err error) error {
	if err == nil || r.r == nil {
		return err
	}
	msg := r.text(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose message was redacted.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
