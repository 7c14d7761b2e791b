package h1

// OnWatch makes s call f on the watch's goroutine each time a watch starts
// reading, before it reads.
func OnWatch(s *Server, f func()) { s.onWatch = f }
