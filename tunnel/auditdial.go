package tunnel

// Dials in the audit trail (Agent.AuditDials, PLUG_AUDIT_DIALS=on): each
// connection a run asks the agent to make into the cluster (plug -c, ssh
// -L, a UDP flow) is one run.dial event, the refused ones with their reason.
// A key's dials are written within a token bucket: AuditDialBurst at once,
// then one every auditDialEvery seconds; the dials left out are counted,
// and the next event written for that key says how many (Dropped). At
// most maxGateAddrs keys have a bucket of their own; past that, keys new
// to it share one.
const (
	AuditDialBurst = 60
	auditDialEvery = 1 // seconds
)

func newDialAudit() *rateBuckets {
	return newRateBuckets(AuditDialBurst, 1.0/auditDialEvery, maxGateAddrs)
}

// auditDial writes the dial of host:port over network ("tcp" or "udp")
// for dc's run, when the agent audits dials and the key's bucket allows;
// refusal is why the agent did not connect, if it did not.
func (dc *devConn) auditDial(network, host string, port int, refusal error) {
	a := dc.a
	if !a.AuditDials {
		return
	}
	ok, dropped := a.dials.take(dc.fingerprint)
	if !ok {
		return
	}
	e := AuditEvent{Event: AuditRunDial, User: dc.user, Key: dc.fingerprint, From: addrString(dc.conn.RemoteAddr()),
		Name: PeerText(host), Port: port, UDP: network == "udp", Dropped: dropped}
	if r := dc.currentRun(); r != nil {
		e.Run = r.id
	}
	if refusal != nil {
		e.Reason = refusal.Error()
	}
	a.audit(e)
}
