package tunnel

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/crypto/ssh"
)

// A key is asked about (Keys.Admit) only once its holder has proven it:
// the SSH library calls PublicKeyCallback for a key merely offered, before
// any signature, so the agent answers every offer "go on" there and
// decides in VerifiedPublicKeyCallback, after the signature is verified.
// Nothing is recorded, logged or audited of a key that was only offered.
//
// What a stranger's proven keys may make the agent do is bounded by the
// source network (sourceOf: an IPv4 /24, an IPv6 /64) and overall:
//   - new pending requests (Requester): requestBurst per network, then one
//     every requestEvery; requestBurstAll overall, then requestRateAll a
//     minute;
//   - lines of the log and of the audit trail about refused keys:
//     refusalBurst per network, then one every refusalEvery;
//     refusalBurstAll overall, then refusalRateAll a second. A line left
//     out is counted, and the next one logged for that network says how
//     many were.
const (
	requestBurst    = 5
	requestEvery    = 60 // seconds
	requestBurstAll = 20
	requestRateAll  = 10 // a minute
	refusalBurst    = 10
	refusalEvery    = 10 // seconds
	refusalBurstAll = 100
	refusalRateAll  = 5 // a second
	// maxGateAddrs bounds the addresses remembered; past it, addresses
	// new to the gate share one bucket.
	maxGateAddrs = 4096
)

// admissionGate holds those bounds.
type admissionGate struct {
	requests, requestsAll *rateBuckets
	refusals, refusalsAll *rateBuckets
}

func newAdmissionGate() *admissionGate {
	return &admissionGate{
		requests:    newRateBuckets(requestBurst, 1.0/requestEvery, maxGateAddrs),
		requestsAll: newRateBuckets(requestBurstAll, requestRateAll/60.0, 1),
		refusals:    newRateBuckets(refusalBurst, 1.0/refusalEvery, maxGateAddrs),
		refusalsAll: newRateBuckets(refusalBurstAll, refusalRateAll, 1),
	}
}

// take takes a token from the bucket of src in perAddr, then from all; it
// returns whether both had one, and how many takes of src were refused
// since the last granted.
func take(perAddr, all *rateBuckets, src string) (bool, int) {
	ok, dropped := perAddr.take(src)
	if !ok {
		return false, 0
	}
	if ok, _ := all.take(""); !ok {
		return false, 0
	}
	return true, dropped
}

// Requester is a Keys that records a request for each key it refuses as
// not yet admitted, for someone to accept (Members: a member, with plug
// members accept). The agent asks Request only of a key its holder has
// proven, and within the bounds above; Admit itself records nothing.
type Requester interface {
	Keys
	// Request records (or refreshes) the request of key for user, coming
	// from from, and returns the refusal the developer reads.
	Request(user string, key ssh.PublicKey, from net.Addr) error
}

// admitProven decides about a key whose holder has proven it (the
// signature is verified): Keys admits it, within its cap of connections,
// or it is refused with a banner the developer reads, the refusal logged
// and audited and its request recorded within the gate's bounds.
func (a *Agent) admitProven(m ssh.ConnMetadata, key ssh.PublicKey, perms *ssh.Permissions) (*ssh.Permissions, error) {
	fp := perms.Extensions[extFingerprint]
	var err error
	admitted := true
	if a.Keys != nil {
		if err = a.Keys.Admit(m.User(), key, m.RemoteAddr()); err != nil {
			err, admitted = a.request(m, key, err), false
		}
	}
	if err == nil {
		if err = a.usage.check(fp, useConn); err == nil {
			return perms, nil
		}
	}
	src := sourceOf(m.RemoteAddr()).String()
	if ok, dropped := take(a.admit.refusals, a.admit.refusalsAll, src); ok {
		more := ""
		if dropped > 0 {
			more = fmt.Sprintf(" (%d more refusals of keys from %s were not logged)", dropped, src)
		}
		a.Logf("refused the key %s of %s from %s: %v%s", fp, PeerText(m.User()), m.RemoteAddr(), err, more)
		if !admitted {
			a.auditRefused(fp, m.User(), m.RemoteAddr(), err)
		}
	}
	return nil, &ssh.BannerError{Err: err, Message: fmt.Sprintf("plug agent: key %s: %v\n", fp, err)}
}

// request records the request of a key Keys refused as not yet a member
// (a *NotMemberError), if Keys keeps requests and the gate lets one more
// in from m's address, and returns the refusal to tell.
func (a *Agent) request(m ssh.ConnMetadata, key ssh.PublicKey, refusal error) error {
	var nm *NotMemberError
	rq, keeps := a.Keys.(Requester)
	if !keeps || !errors.As(refusal, &nm) || nm.Full {
		return refusal
	}
	if !nm.Recorded { // a new request, not the refresh of a pending one
		if ok, _ := take(a.admit.requests, a.admit.requestsAll, sourceOf(m.RemoteAddr()).String()); !ok {
			return &NotMemberError{Key: nm.Key, Limited: true}
		}
	}
	return rq.Request(m.User(), key, m.RemoteAddr())
}
