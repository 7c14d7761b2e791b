package server

import (
	"context"
	"time"
)

// maxDrainGrace caps the part of the shutdown time kept back for calls
// still waiting for an expert agent when the drain runs out.
const maxDrainGrace = 2 * time.Second

// drainHTTP stops the HTTP server: new connections are refused at once and
// requests in flight may finish until shortly before ctx's deadline (a
// quarter of the time left, at most maxDrainGrace, is kept back). What
// is still open then is mostly calls waiting for an expert agent; rather
// than cutting their connections (the client would see a bare transport
// error), it closes the requester, which fails those calls with
// requester.ErrClosed, so that their handlers answer with a tool error
// saying the gateway is shutting down, and gives the handlers the rest of
// the time to write it. Only what is still open at the deadline is cut.
func (s *Server) drainHTTP(ctx context.Context) error {
	drainCtx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		drainCtx, cancel = context.WithDeadline(ctx, dl.Add(-min(time.Until(dl)/4, maxDrainGrace)))
		defer cancel()
	}
	err := s.http.Shutdown(drainCtx)
	if err != nil && ctx.Err() == nil && s.requester != nil {
		s.log.Warn("requests still in flight near the shutdown deadline: failing the expert-agent calls among them")
		if cerr := s.requester.Close(ctx); cerr != nil {
			s.log.WithError(cerr).Warn("closing the requester during the drain")
		}
		err = s.http.Shutdown(ctx)
	}
	if err != nil {
		_ = s.http.Close()
	}
	return err
}
