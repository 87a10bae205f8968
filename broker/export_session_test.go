package broker

// SessionWaiting reports whether a long poll waits on s (tests only).
func SessionWaiting(s *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiter != nil
}
