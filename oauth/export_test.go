package oauth

import "time"

// SetRefreshGraceClock sets the clock of s's refresh grace, so that a test
// moves past the grace without waiting for it. Call it before s serves.
func SetRefreshGraceClock(s *Server, now func() time.Time) {
	if s.grace != nil {
		s.grace.now = now
	}
}
