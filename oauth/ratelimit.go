package oauth

import (
	"sync/atomic"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
)

// sparseLog writes at most a few lines a second of a kind that anyone can
// make for free (refused requests) and counts the rest: each line it
// writes says how many it left out since the one before.
type sparseLog struct {
	lim     *rate.Limiter
	skipped atomic.Int64
}

// newSparseLog writes perSecond lines a second, burst at once.
func newSparseLog(perSecond rate.Limit, burst int) *sparseLog {
	return &sparseLog{lim: rate.NewLimiter(perSecond, burst)}
}

// entry returns the entry to write, with the count of the lines left out
// before it, or nil when this line is to be left out.
func (s *sparseLog) entry(log *logrus.Entry) *logrus.Entry {
	if !s.lim.Allow() {
		s.skipped.Add(1)
		return nil
	}
	if n := s.skipped.Swap(0); n > 0 {
		return log.WithField("notLoggedBefore", n)
	}
	return log
}
