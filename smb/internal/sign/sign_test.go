package sign

import (
	"encoding/hex"
	"testing"

	"plug/smb/internal/wire"
)

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// RFC 4493 section 4, and longer messages checked against an independent
// AES-CMAC.
func TestCMAC(t *testing.T) {
	key := unhex("2b7e151628aed2a6abf7158809cf4f3c")
	rfc := unhex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411")
	long := make([]byte, 10007)
	for i := range long {
		long[i] = byte(i*13 + 5)
	}
	c, err := newCMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		msg  []byte
		want string
	}{
		{rfc[:0], "bb1d6929e95937287fa37d129b756746"},
		{rfc[:16], "070a16b46b4d4144f79bdd9dd04a287c"},
		{rfc[:40], "dfa66747de9ae63030ca32611497c827"},
		{long[:4096], "311d0b78f65eb3c7f3d05da53aba622e"},
		{long[:4097], "bfddbc76706295bcb155de9c0f3c53d8"},
		{long, "a3d8b2a75a09b44e19f9299243e12b23"},
	} {
		got := c.sum(v.msg)
		if hex.EncodeToString(got[:]) != v.want {
			t.Errorf("CMAC of %d bytes = %x, want %s", len(v.msg), got, v.want)
		}
	}
}

// The SP800-108 counter-mode KDF with HMAC-SHA256, checked against an
// independent implementation.
func TestDerive(t *testing.T) {
	ki := unhex("000102030405060708090a0b0c0d0e0f")
	ctx := make([]byte, 64)
	for i := range ctx {
		ctx[i] = byte(i)
	}
	got := Derive(ki, []byte("SMBSigningKey\x00"), ctx, 128)
	if want := "f7e5401ecc6e79ef9eab401b05004e4f"; hex.EncodeToString(got) != want {
		t.Errorf("Derive = %x, want %s", got, want)
	}
	if n := len(Derive(ki, []byte("x"), nil, 256)); n != 32 {
		t.Errorf("Derive of 256 bits gave %d bytes", n)
	}
}

func TestSignVerify(t *testing.T) {
	key := unhex("2b7e151628aed2a6abf7158809cf4f3c")
	for _, alg := range []uint16{HMACSHA256, AESCMAC, AESGMAC} {
		s, err := New(alg, key)
		if err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, wire.HeaderSize+100)
		h := wire.Header{Command: wire.Read, MessageID: 7, Flags: wire.FlagResponse}
		h.Put(msg)
		s.Sign(msg)
		if !s.Verify(msg) {
			t.Errorf("alg %d: a signed message does not verify", alg)
		}
		msg[wire.HeaderSize+50] ^= 1
		if s.Verify(msg) {
			t.Errorf("alg %d: a changed message verifies", alg)
		}
	}
	if _, err := New(9, key); err == nil {
		t.Errorf("New of an unknown algorithm succeeded")
	}
}
