package tunnel

import (
	"fmt"
	"sync"
	"time"
)

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
	logf func(format string, args ...any)

	mu    sync.Mutex
	peers map[string]*logBucket
	other logBucket // for peers beyond maxLogPeers
}

type logBucket struct {
	tokens  float64
	last    time.Time
	dropped int
}

func newPeerLog(logf func(string, ...any)) *peerLog {
	return &peerLog{logf: logf, peers: map[string]*logBucket{}, other: logBucket{tokens: peerLogBurst}}
}

// printf logs one line about peer, unless peer has used its share.
func (l *peerLog) printf(peer, format string, args ...any) {
	l.mu.Lock()
	b := l.bucket(peer)
	now := time.Now()
	if !b.last.IsZero() {
		b.tokens = min(peerLogBurst, b.tokens+now.Sub(b.last).Seconds()*peerLogRate)
	}
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		l.mu.Unlock()
		return
	}
	b.tokens--
	dropped := b.dropped
	b.dropped = 0
	l.mu.Unlock()
	if dropped > 0 {
		format = "%s" + format
		args = append([]any{fmt.Sprintf("(%d more lines about %s were not logged) ", dropped, peer)}, args...)
	}
	l.logf(format, args...)
}

// bucket is peer's bucket, made full for a new peer. Called with l.mu held.
func (l *peerLog) bucket(peer string) *logBucket {
	if b := l.peers[peer]; b != nil {
		return b
	}
	if len(l.peers) >= maxLogPeers {
		l.prune()
	}
	if len(l.peers) >= maxLogPeers {
		return &l.other
	}
	b := &logBucket{tokens: peerLogBurst}
	l.peers[peer] = b
	return b
}

// prune forgets the peers whose bucket has refilled: they would start
// full again anyway.
func (l *peerLog) prune() {
	now := time.Now()
	for peer, b := range l.peers {
		if b.dropped == 0 && b.tokens+now.Sub(b.last).Seconds()*peerLogRate >= peerLogBurst {
			delete(l.peers, peer)
		}
	}
}
