package proxy

import "github.com/poplimit/poplimit/proxy/fastconn"

// combineConns is how many clients the server has before it joins their
// reads into one system call per moment (fastconn.Shared): with fewer, few
// are ready at once and the yield a combined read costs is not paid back.
const combineConns = 16

// readCombiner is the Combiner of cc's reads now, or nil.
func (cc *clientConn) readCombiner() *fastconn.Combiner {
	if cc.s.st.currConns.Load() < combineConns {
		return nil
	}
	return fastconn.Shared()
}
