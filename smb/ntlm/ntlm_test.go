package ntlm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// authMsg builds an AUTHENTICATE message with the given fields (Unicode,
// no MIC).
func authMsg(flags uint32, user, domain string, nt, encKey []byte) []byte {
	fields := [][]byte{nil, nt, utf16le(domain), utf16le(user), utf16le("WS"), encKey}
	m := make([]byte, 64)
	copy(m, signature)
	binary.LittleEndian.PutUint32(m[8:], 3)
	binary.LittleEndian.PutUint32(m[60:], flags)
	for i, f := range fields {
		putField(m[12+8*i:], len(f), len(m))
		m = append(m, f...)
	}
	return m
}

// The example of MS-NLMP 4.2.4: user "User", domain "Domain", password
// "Password", server challenge 0123456789abcdef, client challenge aa..aa,
// time 0.
func TestNTLMv2Example(t *testing.T) {
	av := unhex("02000c0044006f006d00610069006e0001000c0053006500720076006500720000000000")
	temp := append(unhex("0101000000000000"+"0000000000000000"+"aaaaaaaaaaaaaaaa"+"00000000"), av...)
	temp = append(temp, 0, 0, 0, 0)
	nt := append(unhex("68cd0ab851e51c96aabc927bebef6a1c"), temp...)
	neg := append(append([]byte(nil), signature...), 1, 0, 0, 0, 0x33, 0x82, 0x8a, 0xe2)

	newServer := func(password string) *server {
		s := &server{creds: NewCredentials("User", password, "Server")}
		if _, err := s.challengeFor(neg); err != nil {
			t.Fatal(err)
		}
		copy(s.challenge[:], unhex("0123456789abcdef"))
		return s
	}

	s := newServer("Password")
	if err := s.authenticate(authMsg(flagUnicode|flagESS, "User", "Domain", nt, nil)); err != nil {
		t.Fatalf("the example's response was refused: %v", err)
	}
	if got := hex.EncodeToString(s.key); got != "8de40ccadbc14a82f15cb0ad0de95ca3" {
		t.Errorf("session base key %s", got)
	}

	// With key exchange the exported key is the client's random one.
	s = newServer("Password")
	if err := s.authenticate(authMsg(flagUnicode|flagESS|flagKeyExchange|flag128, "user", "Domain", nt, unhex("c5dad2544fc9799094ce1ce90bc9d03e"))); err != nil {
		t.Fatalf("the example's response with key exchange was refused: %v", err)
	}
	if got := hex.EncodeToString(s.key); got != "55555555555555555555555555555555" {
		t.Errorf("exported session key %s", got)
	}

	for _, c := range []struct {
		name     string
		password string
		msg      []byte
		want     error
	}{
		{"wrong password", "password", authMsg(flagUnicode, "User", "Domain", nt, nil), ErrLogon},
		{"other user", "Password", authMsg(flagUnicode, "Guest", "Domain", nt, nil), ErrLogon},
		{"other domain", "Password", authMsg(flagUnicode, "User", "DOMAIN", nt, nil), ErrLogon},
		{"anonymous", "Password", authMsg(flagUnicode, "", "", nil, nil), ErrRefused},
		{"NTLMv1", "Password", authMsg(flagUnicode, "User", "Domain", nt[:24], nil), ErrRefused},
		{"short", "Password", authMsg(flagUnicode, "User", "Domain", nt[:30], nil), ErrMalformed},
		{"truncated", "Password", authMsg(flagUnicode, "User", "Domain", nt, nil)[:70], ErrMalformed},
	} {
		err := newServer(c.password).authenticate(c.msg)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestChallenge(t *testing.T) {
	s := &server{creds: NewCredentials("u", "p", "plug")}
	neg := append(append([]byte(nil), signature...), 1, 0, 0, 0, 0x37, 0x82, 0x08, 0xe2)
	m, err := s.challengeFor(neg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(m, signature) || binary.LittleEndian.Uint32(m[8:]) != 2 {
		t.Fatalf("not a CHALLENGE message: %x", m[:12])
	}
	flags := binary.LittleEndian.Uint32(m[20:])
	for _, f := range []uint32{flagUnicode, flagESS, flagTargetInfo, flagKeyExchange, flag128, flagSign, flagSeal} {
		if flags&f == 0 {
			t.Errorf("challenge flags %#x lack %#x", flags, f)
		}
	}
	if _, err := s.challengeFor(neg[:10]); err == nil {
		t.Errorf("a truncated NEGOTIATE was accepted")
	}
}

func TestSPNEGOInit(t *testing.T) {
	tok := InitToken()
	if tok[0] != 0x60 || !bytes.Contains(tok, unhex("2b06010401823702020a")) {
		t.Fatalf("init token %x does not name NTLM", tok)
	}
	// Garbage and truncated tokens are errors, never panics.
	for n := range tok {
		a := NewAcceptor(NewCredentials("u", "p", "plug"))
		if _, _, err := a.Step(tok[:n]); err == nil {
			t.Errorf("a token truncated to %d bytes was accepted", n)
		}
	}
}
