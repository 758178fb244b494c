package localnames

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
)

// The DNS messages a run's responder reads and writes (RFC 1035, with the
// OPT record of RFC 6891 accepted in a query). It reads only what a stub
// resolver sends: one question, no answer or authority records, at most
// one additional record, which must be OPT; anything else is refused as
// malformed. Its answers are at most one A record, with the question as
// asked (its letters' case kept).

// DNS header flags and codes used here.
const (
	dnsHeaderLen = 12

	flagQR = 1 << 15 // a response
	flagAA = 1 << 10 // authoritative
	flagRD = 1 << 8  // recursion desired, copied from the query
	flagRA = 1 << 7  // recursion available

	opcodeMask    = 0xF << 11
	rcodeFormErr  = 1
	rcodeServFail = 2
	rcodeNotImp   = 4

	typeA   = 1
	typeOPT = 41
	classIN = 1

	maxDNSName = 255 // bytes of a name on the wire
)

// answerTTL is the time to live of an answer, in seconds: short, as a
// name may leave the cluster.
const answerTTL = 5

// errMalformed is any message that is not a query of the form above.
var errMalformed = errors.New("malformed DNS query")

// dnsQuery is a query as read by parseQuery.
type dnsQuery struct {
	id       uint16
	flags    uint16
	question []byte // the question section as sent: name, type, class
	qtype    uint16
	qclass   uint16
	// host is the name asked, lowercase, without its final dot; empty
	// when the name is not a host name (labels of letters, digits, '-'
	// and '_'), which is then no name of the run's.
	host string
}

// parseQuery reads msg, a DNS query, strictly: see above.
func parseQuery(msg []byte) (dnsQuery, error) {
	if len(msg) < dnsHeaderLen {
		return dnsQuery{}, errMalformed
	}
	q := dnsQuery{id: binary.BigEndian.Uint16(msg), flags: binary.BigEndian.Uint16(msg[2:])}
	qd, an, ns, ar := binary.BigEndian.Uint16(msg[4:]), binary.BigEndian.Uint16(msg[6:]), binary.BigEndian.Uint16(msg[8:]), binary.BigEndian.Uint16(msg[10:])
	if q.flags&(flagQR|opcodeMask) != 0 || qd != 1 || an != 0 || ns != 0 || ar > 1 {
		return dnsQuery{}, errMalformed
	}
	host, end, err := readName(msg, dnsHeaderLen)
	if err != nil || end+4 > len(msg) {
		return dnsQuery{}, errMalformed
	}
	q.qtype, q.qclass = binary.BigEndian.Uint16(msg[end:]), binary.BigEndian.Uint16(msg[end+2:])
	q.question = msg[dnsHeaderLen : end+4]
	q.host = host
	rest := msg[end+4:]
	if ar == 1 {
		// The OPT record: the root name, its type, class, TTL, and data.
		if len(rest) < 11 || rest[0] != 0 || binary.BigEndian.Uint16(rest[1:]) != typeOPT {
			return dnsQuery{}, errMalformed
		}
		if int(binary.BigEndian.Uint16(rest[9:])) != len(rest)-11 {
			return dnsQuery{}, errMalformed
		}
		rest = nil
	}
	if len(rest) != 0 {
		return dnsQuery{}, errMalformed
	}
	return q, nil
}

// readName reads the uncompressed name at msg[at:], returning it as a
// lowercase host name (empty when it is not one) and where it ends.
func readName(msg []byte, at int) (string, int, error) {
	var b strings.Builder
	host, start := true, at
	for {
		if at >= len(msg) {
			return "", 0, errMalformed
		}
		n := int(msg[at])
		if n == 0 {
			at++
			break
		}
		if n > 63 || at+1+n > len(msg) || at+1+n-start > maxDNSName-1 {
			return "", 0, errMalformed // a pointer (0xC0), a reserved length, or too long
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		for _, c := range msg[at+1 : at+1+n] {
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			default:
				host = false
			}
			b.WriteByte(c)
		}
		at += 1 + n
	}
	if !host {
		return "", at, nil
	}
	return b.String(), at, nil
}

// answer is the response to q: rcode, and an A record of addr when it is
// valid.
func answer(q dnsQuery, rcode int, addr netip.Addr) []byte {
	flags := flagQR | flagAA | flagRA | q.flags&flagRD | uint16(rcode)
	an := 0
	if addr.IsValid() {
		an = 1
	}
	msg := make([]byte, 0, dnsHeaderLen+len(q.question)+16)
	msg = binary.BigEndian.AppendUint16(msg, q.id)
	msg = binary.BigEndian.AppendUint16(msg, flags)
	msg = append(msg, 0, 1, 0, byte(an), 0, 0, 0, 0)
	msg = append(msg, q.question...)
	if an == 1 {
		ip := addr.As4()
		msg = append(msg, 0xC0, dnsHeaderLen) // the name: a pointer to the question's
		msg = binary.BigEndian.AppendUint16(msg, typeA)
		msg = binary.BigEndian.AppendUint16(msg, classIN)
		msg = binary.BigEndian.AppendUint32(msg, answerTTL)
		msg = binary.BigEndian.AppendUint16(msg, 4)
		msg = append(msg, ip[:]...)
	}
	return msg
}

// refusal is the answer to msg when it is not a query parseQuery reads:
// FORMERR, or NOTIMP for an opcode other than QUERY, with msg's id; nil
// when msg is too short to answer or is itself a response.
func refusal(msg []byte) []byte {
	if len(msg) < dnsHeaderLen || msg[2]&0x80 != 0 {
		return nil
	}
	flags := binary.BigEndian.Uint16(msg[2:])
	rcode := uint16(rcodeFormErr)
	if flags&opcodeMask != 0 {
		rcode = rcodeNotImp
	}
	out := make([]byte, dnsHeaderLen)
	copy(out, msg[:2])
	binary.BigEndian.PutUint16(out[2:], flagQR|flags&(opcodeMask|flagRD)|flagRA|rcode)
	return out
}

// isResponseTo reports whether msg is a DNS response with id.
func isResponseTo(msg []byte, id uint16) bool {
	return len(msg) >= dnsHeaderLen && binary.BigEndian.Uint16(msg) == id && msg[2]&0x80 != 0
}
