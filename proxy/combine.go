package proxy

import (
	"sync"

	"github.com/poplimit/poplimit/proxy/fastconn"
)

// combined joins the reads of client sockets into one system call per
// moment (fastconn.Combiner) while the server has at least combineConns
// clients: with fewer, few are ready at once and the yield a combined read
// costs is not paid back. One ring for the process, made on first use.
var combined = sync.OnceValue(fastconn.NewCombiner)

const combineConns = 16

// readCombiner is the Combiner of cc's reads now, or nil.
func (cc *clientConn) readCombiner() *fastconn.Combiner {
	if cc.s.st.currConns.Load() < combineConns {
		return nil
	}
	return combined()
}
