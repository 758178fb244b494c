package ntlm

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/rc4"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"strings"
	"time"
	"unicode/utf16"

	"golang.org/x/crypto/md4"
)

// Negotiate flags (MS-NLMP 2.2.2.5).
const (
	flagUnicode     uint32 = 0x00000001
	flagOEM         uint32 = 0x00000002
	flagRequestTgt  uint32 = 0x00000004
	flagSign        uint32 = 0x00000010
	flagSeal        uint32 = 0x00000020
	flagNTLM        uint32 = 0x00000200
	flagAlwaysSign  uint32 = 0x00008000
	flagTargetSrv   uint32 = 0x00020000
	flagESS         uint32 = 0x00080000
	flagTargetInfo  uint32 = 0x00800000
	flagVersion     uint32 = 0x02000000
	flag128         uint32 = 0x20000000
	flagKeyExchange uint32 = 0x40000000
	flag56          uint32 = 0x80000000
)

// AV pair ids (MS-NLMP 2.2.2.1).
const (
	avEOL             = 0
	avNbComputerName  = 1
	avNbDomainName    = 2
	avDNSComputerName = 3
	avDNSDomainName   = 4
	avFlags           = 6
	avTimestamp       = 7
)

var signature = []byte("NTLMSSP\x00")

// Errors of an authentication. ErrLogon is a wrong user name or password;
// ErrRefused a logon kind that is never accepted (anonymous, guest's empty
// password, NTLMv1); ErrMalformed a message that does not parse.
var (
	ErrLogon     = errors.New("wrong user name or password")
	ErrRefused   = errors.New("anonymous, guest and NTLMv1 logons are refused")
	ErrMalformed = errors.New("malformed NTLM message")
)

// Credentials are the one user name and password a server accepts.
type Credentials struct {
	user   string
	ntHash []byte
	// Target is the server's name in its challenge (NetBIOS form).
	target string
}

// NewCredentials holds user and password for checking logons; target is
// the name the server calls itself.
func NewCredentials(user, password, target string) *Credentials {
	h := md4.New()
	h.Write(utf16le(password))
	return &Credentials{user: user, ntHash: h.Sum(nil), target: strings.ToUpper(target)}
}

// server is one NTLM exchange.
type server struct {
	creds     *Credentials
	challenge [8]byte
	negotiate []byte // the client's NEGOTIATE, for the MIC
	chalMsg   []byte // our CHALLENGE
	flags     uint32 // as the AUTHENTICATE message settled them
	key       []byte // the exported session key
	user      string
	domain    string
	host      string
	now       func() time.Time
}

// challengeFor answers the client's NEGOTIATE message.
func (s *server) challengeFor(neg []byte) ([]byte, error) {
	if len(neg) < 16 || !bytes.Equal(neg[:8], signature) || binary.LittleEndian.Uint32(neg[8:]) != 1 {
		return nil, ErrMalformed
	}
	cflags := binary.LittleEndian.Uint32(neg[12:])
	s.negotiate = append([]byte(nil), neg...)
	if _, err := rand.Read(s.challenge[:]); err != nil {
		return nil, err
	}
	flags := flagNTLM | flagTargetSrv | flagESS | flagTargetInfo | flagVersion | flagRequestTgt | flagAlwaysSign
	flags |= cflags & (flagSign | flagSeal | flag128 | flag56 | flagKeyExchange)
	if cflags&flagUnicode != 0 || cflags&flagOEM == 0 {
		flags |= flagUnicode
	} else {
		flags |= flagOEM
	}
	name := s.encode(flags, s.creds.target)
	now := s.now
	if now == nil {
		now = time.Now
	}
	var info []byte
	info = appendAV(info, avNbDomainName, utf16le(s.creds.target))
	info = appendAV(info, avNbComputerName, utf16le(s.creds.target))
	info = appendAV(info, avDNSDomainName, utf16le(strings.ToLower(s.creds.target)))
	info = appendAV(info, avDNSComputerName, utf16le(strings.ToLower(s.creds.target)))
	var ts [8]byte
	binary.LittleEndian.PutUint64(ts[:], uint64(now().UnixNano()/100+116444736000000000))
	info = appendAV(info, avTimestamp, ts[:])
	info = appendAV(info, avEOL, nil)

	const head = 56
	m := make([]byte, head, head+len(name)+len(info))
	copy(m, signature)
	le := binary.LittleEndian
	le.PutUint32(m[8:], 2)
	putField(m[12:], len(name), head)
	le.PutUint32(m[20:], flags)
	copy(m[24:32], s.challenge[:])
	putField(m[40:], len(info), head+len(name))
	// Version: 10.0, build 20348, NTLM revision 15.
	copy(m[48:56], []byte{10, 0, 0x5C, 0x4F, 0, 0, 0, 15})
	m = append(append(m, name...), info...)
	s.chalMsg = m
	return m, nil
}

// authenticate checks the client's AUTHENTICATE message.
func (s *server) authenticate(auth []byte) error {
	if len(auth) < 64 || !bytes.Equal(auth[:8], signature) || binary.LittleEndian.Uint32(auth[8:]) != 3 {
		return ErrMalformed
	}
	lowest := len(auth)
	field := func(off int) ([]byte, error) {
		n := int(binary.LittleEndian.Uint16(auth[off:]))
		at := int(binary.LittleEndian.Uint32(auth[off+4:]))
		if n == 0 {
			return nil, nil
		}
		if at < 64 || at > len(auth) || n > len(auth)-at {
			return nil, ErrMalformed
		}
		lowest = min(lowest, at)
		return auth[at : at+n], nil
	}
	var f [6][]byte
	for i := range f {
		b, err := field(12 + 8*i)
		if err != nil {
			return err
		}
		f[i] = b
	}
	ntResp, domainB, userB, hostB, encKey := f[1], f[2], f[3], f[4], f[5]
	s.flags = binary.LittleEndian.Uint32(auth[60:])
	var err error
	if s.domain, err = s.decode(domainB); err != nil {
		return err
	}
	if s.user, err = s.decode(userB); err != nil {
		return err
	}
	if s.host, err = s.decode(hostB); err != nil {
		return err
	}
	if len(ntResp) == 0 || s.user == "" {
		return ErrRefused // anonymous
	}
	if len(ntResp) <= 24 {
		return ErrRefused // NTLMv1 or LM only
	}
	if len(ntResp) < 16+28 {
		return ErrMalformed
	}
	if !validAVPairs(ntResp[16+28:]) {
		return ErrMalformed
	}
	if !strings.EqualFold(s.user, s.creds.user) {
		return ErrLogon
	}
	owf := hmacMD5(s.creds.ntHash, utf16le(strings.ToUpper(s.user)+s.domain))
	proof, blob := ntResp[:16], ntResp[16:]
	want := hmacMD5(owf, s.challenge[:], blob)
	if subtle.ConstantTimeCompare(proof, want) != 1 {
		return ErrLogon
	}
	baseKey := hmacMD5(owf, proof)
	s.key = baseKey
	if s.flags&flagKeyExchange != 0 {
		if len(encKey) != 16 {
			return ErrMalformed
		}
		c, _ := rc4.NewCipher(baseKey)
		s.key = make([]byte, 16)
		c.XORKeyStream(s.key, encKey)
	}
	// A client whose response says it sent a MIC must have one that
	// covers the three messages.
	if avFlagsOf(blob[28:])&0x2 != 0 {
		if lowest < 88 {
			return ErrMalformed
		}
		msg := append([]byte(nil), auth...)
		mic := append([]byte(nil), msg[72:88]...)
		clear(msg[72:88])
		if subtle.ConstantTimeCompare(mic, hmacMD5(s.key, s.negotiate, s.chalMsg, msg)) != 1 {
			return ErrLogon
		}
	}
	return nil
}

// validAVPairs reports whether b starts with a well-formed list of AV
// pairs, ended by MsvAvEOL.
func validAVPairs(b []byte) bool {
	for len(b) >= 4 {
		id, n := binary.LittleEndian.Uint16(b), int(binary.LittleEndian.Uint16(b[2:]))
		if n > len(b)-4 {
			return false
		}
		if id == avEOL {
			return n == 0
		}
		b = b[4+n:]
	}
	return false
}

// avFlagsOf is the MsvAvFlags value among the AV pairs in b, 0 if none.
func avFlagsOf(b []byte) uint32 {
	for len(b) >= 4 {
		id, n := binary.LittleEndian.Uint16(b), int(binary.LittleEndian.Uint16(b[2:]))
		b = b[4:]
		if id == avEOL || n > len(b) {
			return 0
		}
		if id == avFlags && n == 4 {
			return binary.LittleEndian.Uint32(b)
		}
		b = b[n:]
	}
	return 0
}

func (s *server) encode(flags uint32, str string) []byte {
	if flags&flagUnicode != 0 {
		return utf16le(str)
	}
	return []byte(str)
}

func (s *server) decode(b []byte) (string, error) {
	if s.flags&flagUnicode == 0 {
		return string(bytes.ToValidUTF8(b, []byte("?"))), nil
	}
	if len(b)%2 != 0 {
		return "", ErrMalformed
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u)), nil
}

func utf16le(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

func appendAV(b []byte, id uint16, v []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, id)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

func putField(b []byte, n, off int) {
	binary.LittleEndian.PutUint16(b, uint16(n))
	binary.LittleEndian.PutUint16(b[2:], uint16(n))
	binary.LittleEndian.PutUint32(b[4:], uint32(off))
}

func hmacMD5(key []byte, data ...[]byte) []byte {
	m := hmac.New(md5.New, key)
	for _, d := range data {
		m.Write(d)
	}
	return m.Sum(nil)
}

// mic is the NTLM session security signature (MS-NLMP 3.4.4.2) of data,
// sequence number 0, made with the client's keys (to check what the
// client sent) or the server's (to answer).
func (s *server) mic(data []byte, fromClient bool) []byte {
	dir := "server-to-client"
	if fromClient {
		dir = "client-to-server"
	}
	signKey := md5Sum(s.key, []byte("session key to "+dir+" signing key magic constant\x00"))
	var seq [4]byte
	sum := hmacMD5(signKey, seq[:], data)[:8]
	if s.flags&flagKeyExchange != 0 {
		sealBase := s.key
		switch {
		case s.flags&flag128 != 0:
		case s.flags&flag56 != 0:
			sealBase = s.key[:7]
		default:
			sealBase = s.key[:5]
		}
		sealKey := md5Sum(sealBase, []byte("session key to "+dir+" sealing key magic constant\x00"))
		c, _ := rc4.NewCipher(sealKey)
		c.XORKeyStream(sum, sum)
	}
	out := make([]byte, 16)
	binary.LittleEndian.PutUint32(out, 1)
	copy(out[4:12], sum)
	return out
}

func md5Sum(a, b []byte) []byte {
	h := md5.New()
	h.Write(a)
	h.Write(b)
	return h.Sum(nil)
}
