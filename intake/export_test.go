package intake

// SetReadAheadHook makes every read-ahead of s call hook before it takes a connection, so a test can hold it back.
func SetReadAheadHook(s *Stage, hook func()) { s.readAheadHook = hook }

// WaitReadAhead waits until the read-ahead of source, if one is pending, has read its page (it is not taken).
func WaitReadAhead(s *Stage, source string) {
	if v, ok := s.aheads.Load(source); ok {
		<-v.(*readAhead).done
	}
}

// PlansTaken is how many births pages s applied by the plan made when they were read ahead (a rolled-back apply too).
func PlansTaken(s *Stage) int64 { return s.plansTaken.Load() }
