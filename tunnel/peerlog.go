package tunnel

import "fmt"

// A peer may make the agent log only so much: each peer (a developer key,
// or the source address of a connection that has not authenticated) has a
// bucket of peerLogBurst lines, refilled at peerLogRate a second. A line
// over it is not logged but counted, and the next line logged for that
// peer says how many were left out.
const (
	peerLogBurst = 20
	peerLogRate  = 1.0
	// maxLogPeers bounds the buckets kept; past it, peers new to the log
	// share one bucket.
	maxLogPeers = 4096
)

type peerLog struct {
	logf  func(format string, args ...any)
	peers *rateBuckets
}

func newPeerLog(logf func(string, ...any)) *peerLog {
	return &peerLog{logf: logf, peers: newRateBuckets(peerLogBurst, peerLogRate, maxLogPeers)}
}

// printf logs one line about peer, unless peer has used its share.
func (l *peerLog) printf(peer, format string, args ...any) {
	ok, dropped := l.peers.take(peer)
	if !ok {
		return
	}
	if dropped > 0 {
		format = "%s" + format
		args = append([]any{fmt.Sprintf("(%d more lines about %s were not logged) ", dropped, peer)}, args...)
	}
	l.logf(format, args...)
}
