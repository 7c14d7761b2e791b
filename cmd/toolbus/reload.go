package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/config"
	"github.com/toolbus/toolbus/server"
)

// reloadTimeout bounds one SIGHUP reload (it reads the store).
const reloadTimeout = 10 * time.Second

// serveUntilDone waits for ctx to end, reloading on every SIGHUP what can
// change at run time: the log level and the rate limits from the config
// file (unless the command line or the environment set them), and the ACL
// rules from the store. Connections stay up.
func serveUntilDone(ctx context.Context, srv *server.Server, configFile string, explicit map[string]bool, limits gateway.RateLimits, log *logrus.Entry) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
			r, err := reloadSettings(configFile, explicit, limits)
			if err == nil {
				err = srv.Reload(rctx, r)
			}
			cancel()
			if err != nil {
				log.WithError(err).Error("reload failed; the running settings stay")
			}
		}
	}
}

// reloadSettings reads the reloadable settings from the config file again;
// limits are those the process started with, kept where the command line
// or the environment set them. A bad file changes nothing.
func reloadSettings(configFile string, explicit map[string]bool, limits gateway.RateLimits) (server.Reload, error) {
	var r server.Reload
	if configFile == "" {
		return r, nil
	}
	file, err := config.Load(configFile)
	if err != nil {
		return r, err
	}
	// The same flags as serve's, on a scratch set: the file is checked as
	// at start, and only the reloadable values are taken from it.
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	level := fs.String("log-level", "", "")
	texts := map[string]*string{}
	dsts := map[string]*gateway.Limit{"rate-limit-token": &limits.PerToken, "rate-limit-user": &limits.PerUser, "rate-limit-agent-tools": &limits.AgentTools}
	for name := range dsts {
		texts[name] = fs.String(name, "", "")
	}
	var reloadable []config.Setting
	for _, s := range file.Settings {
		if fs.Lookup(s.Key) != nil && !explicit[s.Key] {
			reloadable = append(reloadable, s)
		}
	}
	if err := (&config.File{Path: file.Path, Settings: reloadable}).Apply(fs); err != nil {
		return r, err
	}
	if *level != "" {
		lv, err := logrus.ParseLevel(*level)
		if err != nil {
			return r, err
		}
		r.LogLevel = &lv
	}
	for name, dst := range dsts {
		if explicit[name] {
			continue
		}
		if *dst, err = gateway.ParseLimit(*texts[name]); err != nil {
			return r, err
		}
	}
	r.RateLimits = &limits
	return r, nil
}
