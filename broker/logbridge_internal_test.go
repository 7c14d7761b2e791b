package broker

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestSlogBridge(t *testing.T) {
	secret := []byte("s3cret-payload")
	for _, tc := range []struct {
		name   string
		log    func(*slog.Logger)
		level  logrus.Level
		msg    string
		fields logrus.Fields
	}{
		{
			name:   "levels and attrs",
			log:    func(l *slog.Logger) { l.Warn("careful", "client", "c1", "n", 3) },
			level:  logrus.WarnLevel,
			msg:    "careful",
			fields: logrus.Fields{"client": "c1", "n": int64(3)},
		},
		{
			name:   "error level",
			log:    func(l *slog.Logger) { l.Error("bad", "error", errors.New("boom")) },
			level:  logrus.ErrorLevel,
			msg:    "bad",
			fields: logrus.Fields{"error": errors.New("boom")},
		},
		{
			name: "with attrs and groups",
			log: func(l *slog.Logger) {
				l.With("hook", "h1").WithGroup("g").Info("x", "k", "v", slog.Group("sub", "a", 1))
			},
			level:  logrus.InfoLevel,
			msg:    "x",
			fields: logrus.Fields{"hook": "h1", "g.k": "v", "g.sub.a": int64(1)},
		},
		{
			name: "packet payloads are not logged",
			log: func(l *slog.Logger) {
				l.Debug("publish packet rejected", "packet", packets.Packet{
					FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
					TopicName:   "a/b", PacketID: 7, Payload: secret,
				})
			},
			level:  logrus.DebugLevel,
			msg:    "publish packet rejected",
			fields: logrus.Fields{"packet": `Publish id=7 topic="a/b" qos=1 retain=false payload=14B`},
		},
		{
			name:   "will payloads are not logged",
			log:    func(l *slog.Logger) { l.Error("parse will error", "will", mqtt.Will{TopicName: "w", Payload: secret}) },
			level:  logrus.ErrorLevel,
			msg:    "parse will error",
			fields: logrus.Fields{"will": `will topic="w" qos=0 retain=false payload=14B`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger, hook := logtest.NewNullLogger()
			logger.SetLevel(logrus.DebugLevel)
			tc.log(slog.New(newSlogHandler(logrus.NewEntry(logger).WithField("component", "broker"))))
			entries := hook.AllEntries()
			if len(entries) != 1 {
				t.Fatalf("%d entries, want 1", len(entries))
			}
			got := entries[0]
			if got.Level != tc.level || got.Message != tc.msg {
				t.Errorf("entry %v %q, want %v %q", got.Level, got.Message, tc.level, tc.msg)
			}
			if got.Data["component"] != "broker" {
				t.Errorf("component field lost: %v", got.Data)
			}
			for k, want := range tc.fields {
				if g := got.Data[k]; !equalField(g, want) {
					t.Errorf("field %s = %#v, want %#v", k, g, want)
				}
			}
			for k, v := range got.Data {
				if s, ok := v.(string); ok && strings.Contains(s, string(secret)) {
					t.Errorf("field %s leaks the payload: %q", k, s)
				}
			}
		})
	}
}

func equalField(got, want any) bool {
	if we, ok := want.(error); ok {
		ge, ok := got.(error)
		return ok && ge.Error() == we.Error()
	}
	return got == want
}

func TestSlogBridgeEnabled(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.InfoLevel)
	l := slog.New(newSlogHandler(logrus.NewEntry(logger)))
	l.Debug("dropped")
	l.Info("kept")
	if n := len(hook.AllEntries()); n != 1 {
		t.Fatalf("%d entries, want 1 (debug filtered by the logrus level)", n)
	}
}
