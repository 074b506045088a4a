package testenv

import (
	"net"
	"sync/atomic"
)

// CountingConn counts the writes of a client connection to a server: one per request
// that a driver flushes. Tests wrap a driver's dialled connection in it to count round
// trips.
type CountingConn struct {
	net.Conn
	Writes *atomic.Int64
}

func (c CountingConn) Write(b []byte) (int, error) {
	c.Writes.Add(1)
	return c.Conn.Write(b)
}
