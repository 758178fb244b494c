package tunnel

// SSH payloads of the standard port forwarding messages (RFC 4254, section 7),
// marshalled with ssh.Marshal.

// forwardRequest is the payload of the tcpip-forward and
// cancel-tcpip-forward global requests. plug puts the cluster name in Addr.
type forwardRequest struct {
	Addr string
	Port uint32
}

// forwardedChannel is the extra data of a forwarded-tcpip channel: a caller
// at Origin:OriginPort reached Addr:Port, the name the client asked for.
type forwardedChannel struct {
	Addr       string
	Port       uint32
	Origin     string
	OriginPort uint32
}

// directChannel is the extra data of a direct-tcpip channel: connect to
// Host:Port on behalf of Origin:OriginPort.
type directChannel struct {
	Host       string
	Port       uint32
	Origin     string
	OriginPort uint32
}
