package broker

import (
	"context"
	"fmt"
	"log/slog"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"
)

// slogHandler sends mochi's log/slog records to a logrus entry, so that the
// broker's logs go wherever the rest of toolbus logs go, with the same
// fields and level.
type slogHandler struct {
	entry  *logrus.Entry
	fields logrus.Fields // from WithAttrs, keys already prefixed
	prefix string        // from WithGroup: "group." (nested: "a.b.")
}

func newSlogHandler(entry *logrus.Entry) *slogHandler {
	return &slogHandler{entry: entry}
}

func (h *slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.entry.Logger.IsLevelEnabled(logrusLevel(l))
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	fields := make(logrus.Fields, len(h.fields)+r.NumAttrs())
	for k, v := range h.fields {
		fields[k] = v
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(fields, h.prefix, a)
		return true
	})
	e := h.entry.WithFields(fields)
	if !r.Time.IsZero() {
		e = e.WithTime(r.Time)
	}
	e.Log(logrusLevel(r.Level), r.Message)
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	fields := make(logrus.Fields, len(h.fields)+len(attrs))
	for k, v := range h.fields {
		fields[k] = v
	}
	for _, a := range attrs {
		addAttr(fields, h.prefix, a)
	}
	return &slogHandler{entry: h.entry, fields: fields, prefix: h.prefix}
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &slogHandler{entry: h.entry, fields: h.fields, prefix: h.prefix + name + "."}
}

func logrusLevel(l slog.Level) logrus.Level {
	switch {
	case l >= slog.LevelError:
		return logrus.ErrorLevel
	case l >= slog.LevelWarn:
		return logrus.WarnLevel
	case l >= slog.LevelInfo:
		return logrus.InfoLevel
	case l >= slog.LevelDebug:
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}

// addAttr flattens a into fields, groups becoming dotted key prefixes as
// slog's own text handler does.
func addAttr(fields logrus.Fields, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p = prefix + a.Key + "."
		}
		for _, g := range a.Value.Group() {
			addAttr(fields, p, g)
		}
		return
	}
	fields[prefix+a.Key] = fieldValue(a.Value)
}

// fieldValue converts a slog value for logrus. mochi logs whole packets and
// Wills on some paths (rejected publishes, failed deliveries, packet
// errors); those hold payloads and passwords, which must not reach the logs,
// so they are reduced to a summary. Strings a client chose (client IDs,
// topics, filters) are cut, as in the broker's own lines.
func fieldValue(v slog.Value) any {
	switch v.Kind() {
	case slog.KindString:
		return cut(v.String())
	case slog.KindAny:
	default:
		return v.Any()
	}
	switch x := v.Any().(type) {
	case packets.Packet:
		return packetSummary(&x)
	case *packets.Packet:
		if x == nil {
			return nil
		}
		return packetSummary(x)
	case mqtt.Will:
		return fmt.Sprintf("will topic=%q qos=%d retain=%t payload=%dB", cut(x.TopicName), x.Qos, x.Retain, len(x.Payload))
	case error:
		return cutErr(x)
	default:
		return x
	}
}

func packetSummary(pk *packets.Packet) string {
	name, ok := packets.PacketNames[pk.FixedHeader.Type]
	if !ok {
		name = "packet"
	}
	switch pk.FixedHeader.Type {
	case packets.Publish:
		return fmt.Sprintf("%s id=%d topic=%q qos=%d retain=%t payload=%dB", name, pk.PacketID, cut(pk.TopicName), pk.FixedHeader.Qos, pk.FixedHeader.Retain, len(pk.Payload))
	case packets.Subscribe, packets.Unsubscribe:
		const maxFilters = 8 // a SUBSCRIBE may hold thousands
		filters := make([]string, 0, min(len(pk.Filters), maxFilters))
		for _, f := range pk.Filters[:min(len(pk.Filters), maxFilters)] {
			filters = append(filters, cut(f.Filter))
		}
		return fmt.Sprintf("%s id=%d filters=%q of %d", name, pk.PacketID, filters, len(pk.Filters))
	case packets.Connect:
		return fmt.Sprintf("%s client=%q", name, cut(pk.Connect.ClientIdentifier))
	}
	return fmt.Sprintf("%s id=%d reason=%#x", name, pk.PacketID, pk.ReasonCode)
}
