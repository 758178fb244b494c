package seal

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"testing"

	"plug/smb/internal/wire"
)

// The expected outputs were computed with an independent AES-CCM
// (16-byte tag, 11-byte nonce).
func TestCCMVectors(t *testing.T) {
	key := make([]byte, 16)
	nonce := make([]byte, 11)
	aad := make([]byte, 32)
	pt := make([]byte, 100)
	for i := range key {
		key[i] = byte(i)
	}
	for i := range nonce {
		nonce[i] = byte(0x10 + i)
	}
	for i := range aad {
		aad[i] = byte(0x20 + i)
	}
	for i := range pt {
		pt[i] = byte(i * 7)
	}
	b, _ := aes.NewCipher(key)
	c := newCCM(b)
	for _, v := range []struct {
		pt, aad []byte
		want    string
	}{
		{pt, aad, "4c6873cedc9e7b9ab633af2e7638fcc7511fa6dcc34ee04e42ef30be59330033e92d9a4fbf416571806ce7aed370182e24a925376484225cc5b3a0dff8b200f809806291593a5b7d481a42ad02191493bbd45fc7c18d819e6d27ae888338409e1c9e6cf22ccd1fd12cebc2add718657c03d6f097"},
		{nil, nil, "fbc611538f7736cb1c9b1c4edd4e2885"},
		{pt[:32], aad, "4c6873cedc9e7b9ab633af2e7638fcc7511fa6dcc34ee04e42ef30be59330033ee636ebe68f9a80250ea1e1fbf2a4728"},
	} {
		got := c.Seal(nil, nonce, v.pt, v.aad)
		if hex.EncodeToString(got) != v.want {
			t.Errorf("Seal(%d bytes) = %x, want %s", len(v.pt), got, v.want)
		}
		back, err := c.Open(nil, nonce, got, v.aad)
		if err != nil || !bytes.Equal(back, v.pt) {
			t.Errorf("Open(Seal(%d bytes)) = %x, %v", len(v.pt), back, err)
		}
		got[0] ^= 1
		if _, err := c.Open(nil, nonce, got, v.aad); err == nil {
			t.Errorf("Open of a changed ciphertext succeeded")
		}
	}
}

func TestSealOpen(t *testing.T) {
	for _, id := range []uint16{AES128CCM, AES128GCM, AES256CCM, AES256GCM} {
		n := KeySize(id)
		k1, k2 := bytes.Repeat([]byte{1}, n), bytes.Repeat([]byte{2}, n)
		server, err := New(id, k1, k2)
		if err != nil {
			t.Fatal(err)
		}
		client, _ := New(id, k2, k1)
		msg := []byte("a message of some length, longer than one block")
		buf := make([]byte, wire.TransformSize+len(msg), wire.TransformSize+len(msg)+16)
		copy(buf[wire.TransformSize:], msg)
		server.Seal(buf, 42)
		if bytes.Contains(buf, msg) {
			t.Fatalf("cipher %d: the sealed message holds the plaintext", id)
		}
		tr, _ := wire.ParseTransform(buf)
		if tr.SessionID != 42 || int(tr.OriginalSize) != len(msg) {
			t.Fatalf("cipher %d: transform header %+v", id, tr)
		}
		wrong := append(make([]byte, 0, cap(buf)), buf...)
		if _, err := server.Open(wrong); err == nil {
			t.Fatalf("cipher %d: a message opened with the wrong direction's key", id)
		}
		pt, err := client.Open(buf)
		if err != nil || !bytes.Equal(pt, msg) {
			t.Fatalf("cipher %d: Open = %q, %v", id, pt, err)
		}
	}
}
