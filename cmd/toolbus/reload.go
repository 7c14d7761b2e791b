package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/config"
	"github.com/toolbus/toolbus/server"
)

// reloadTimeout bounds one SIGHUP reload (it reads the store).
const reloadTimeout = 10 * time.Second

// rateLimitFlags are serve's flags of gateway.RateLimits, which a SIGHUP
// reloads.
var rateLimitFlags = []struct {
	name, usage string
	field       func(*gateway.RateLimits) *gateway.Limit
}{
	{"rate-limit-token", `requests a minute per token, "N" or "N:BURST" (e.g. 600:50); "" = no limit; over it: 429 with Retry-After`,
		func(l *gateway.RateLimits) *gateway.Limit { return &l.PerToken }},
	{"rate-limit-user", `requests a minute per user, all of its tokens together, "N" or "N:BURST"; "" = no limit`,
		func(l *gateway.RateLimits) *gateway.Limit { return &l.PerUser }},
	{"rate-limit-agent-tools", `expert-agent tool calls a minute, all callers together (protects the agents), "N" or "N:BURST"; "" = no limit`,
		func(l *gateway.RateLimits) *gateway.Limit { return &l.AgentTools }},
}

// parseRateLimits parses the rate-limit flags' texts (text gives one by
// flag name); errors name the flag after prefix ("--" on the command line).
func parseRateLimits(prefix string, text func(name string) string) (gateway.RateLimits, error) {
	var limits gateway.RateLimits
	for _, f := range rateLimitFlags {
		var err error
		if *f.field(&limits), err = gateway.ParseLimit(text(f.name)); err != nil {
			return limits, fmt.Errorf("%s%s: %w", prefix, f.name, err)
		}
	}
	return limits, nil
}

// reloadable are the settings a SIGHUP takes from the config file again.
var reloadable = func() []string {
	names := []string{"log-level"}
	for _, f := range rateLimitFlags {
		names = append(names, f.name)
	}
	return names
}()

// liveSettings are the effective settings as GET /api/v1/admin/config
// shows them, kept up to date by reloads.
type liveSettings struct {
	mu   sync.Mutex
	list []admin.Setting
}

func (l *liveSettings) get() []admin.Setting {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]admin.Setting(nil), l.list...)
}

func (l *liveSettings) set(name, value, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.list {
		if l.list[i].Name == name {
			l.list[i].Value, l.list[i].Source = value, source
		}
	}
}

// reloader reloads what can change at run time: the log level and the
// rate limits from the config file (unless the command line or the
// environment set them; a setting taken out of the file goes back to its
// default), and the ACL rules from the store. Connections stay up. A bad
// file changes nothing. SIGHUP and the console's reload button both call
// it; one reload runs at a time.
type reloader struct {
	mu   sync.Mutex
	srv  *server.Server
	fs   *flag.FlagSet
	src  flagSources
	live *liveSettings
	log  *logrus.Entry
}

// reload runs one reload under reloadTimeout and counts it in the metrics.
func (rl *reloader) reload(ctx context.Context) error {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	values, r, err := reloadSettings(rl.fs, rl.src)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		err = rl.srv.Reload(rctx, r)
		cancel()
	}
	if m := rl.srv.Metrics(); m != nil {
		m.Reloaded(err)
	}
	if err != nil {
		rl.log.WithError(err).Error("reload failed; the running settings stay")
		return err
	}
	for name, v := range values {
		rl.live.set(name, v.value, v.source)
	}
	rl.log.Info("settings reloaded")
	return nil
}

// serveUntilDone waits for ctx to end, reloading on every SIGHUP.
func serveUntilDone(ctx context.Context, hup <-chan os.Signal, rl *reloader) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = rl.reload(ctx) // logged and counted
		}
	}
}

// sourcedValue is a reloaded setting: its value, where it came from
// ("file" or "default") and, from the file, "PATH:LINE".
type sourcedValue struct{ value, source, at string }

// reloadSettings reads what a SIGHUP reloads: the values, and the
// server.Reload they make. An error names the file and line at fault, as
// `toolbus config check` does.
func reloadSettings(fs *flag.FlagSet, src flagSources) (map[string]sourcedValue, server.Reload, error) {
	values, err := reloadValues(fs, src)
	if err != nil {
		return nil, server.Reload{}, err
	}
	r, err := reloadOf(values, fs)
	if err != nil {
		at := flagSources{}
		for name, v := range values {
			if v.at != "" {
				at["@"+name] = v.at
			}
		}
		return nil, server.Reload{}, at.located(err)
	}
	return values, r, nil
}

// reloadValues reads the reloadable settings that the command line and the
// environment left to the file: the file's value, or the default when the
// file no longer sets it.
func reloadValues(fs *flag.FlagSet, src flagSources) (map[string]sourcedValue, error) {
	values := map[string]sourcedValue{}
	for _, name := range reloadable {
		if !src.explicit(name) {
			values[name] = sourcedValue{fs.Lookup(name).DefValue, "default", ""}
		}
	}
	path := configPath(fs)
	if path == "" {
		return values, nil
	}
	file, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	// The file must still be one serve would start with.
	if err := file.CheckKeys(fs, configFlag, checkConfigFlag); err != nil {
		return nil, err
	}
	for _, s := range file.Settings {
		if _, ok := values[s.Key]; ok {
			values[s.Key] = sourcedValue{s.Value, "file", fmt.Sprintf("%s:%d", file.Path, s.Line)}
		}
	}
	return values, nil
}

// reloadOf turns reloaded values into a server.Reload; settings not in
// values keep what the process runs with. Errors name the setting as
// --NAME, for flagSources.located.
func reloadOf(values map[string]sourcedValue, fs *flag.FlagSet) (server.Reload, error) {
	var r server.Reload
	if v, ok := values["log-level"]; ok {
		lv, err := parseLogLevel(v.value)
		if err != nil {
			return r, fmt.Errorf("--log-level: %w", err)
		}
		r.LogLevel = &lv
	}
	limits, err := parseRateLimits("--", func(name string) string {
		if v, ok := values[name]; ok {
			return v.value
		}
		return fs.Lookup(name).Value.String() // as started, for one the file may not change
	})
	if err != nil {
		return r, err
	}
	r.RateLimits = &limits
	return r, nil
}
