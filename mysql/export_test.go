package mysql

// SetAfterLock installs a hook that runs inside every claim transaction once its rows
// are locked (tests hold the transaction open with it).
func SetAfterLock(s *Store, fn func()) { s.afterLock = fn }

// HotQueries returns the statements of the two hot reads and of the two claims, for
// EXPLAIN.
func HotQueries(s *Store) map[string]string {
	return map[string]string{
		"head of lane":       s.q.readLane,
		"unordered due":      s.q.readUnordered,
		"claim head of lane": s.q.claimLaneLocked,
		"claim unordered":    s.q.claimUnordered,
	}
}

// Translate is the driver-error translation every method applies at its edge.
var Translate = translate
