package server

// ReapNow makes one pass of the reaper, as its ticker does: tests that
// move Config.Now drive the reaper themselves.
func ReapNow(s *Server) { s.reap(s.bg) }
