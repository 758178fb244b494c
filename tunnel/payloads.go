package tunnel

// SSH payloads of the standard port forwarding messages (RFC 4254, section 7),
// marshalled with ssh.Marshal.

// forwardRequest is the payload of the tcpip-forward and
// cancel-tcpip-forward global requests. plug puts the cluster name in Addr.
type forwardRequest struct {
	Addr string
	Port uint32
}

// filteredForwardRequest is the global request of a personal takeover:
// tcpip-forward with a Filter. An agent that does not know it refuses it
// (as any unknown request), so that an older agent never takes the name
// over for every caller instead; clients ask only agents whose welcome says
// Filters.
const filteredForwardRequest = "tcpip-forward-filtered@plug"

// filteredForward is the payload of filteredForwardRequest: the name and
// port, as forwardRequest, and the Filter as JSON (at most
// maxFilterPayload bytes). cancel-tcpip-forward gives it back.
type filteredForward struct {
	Addr   string
	Port   uint32
	Filter string
}

// maxFilterPayload bounds the JSON of a filteredForward's Filter.
const maxFilterPayload = 16 << 10

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
