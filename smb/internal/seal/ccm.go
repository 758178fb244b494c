package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
)

// ccm is AES-CCM with a 16-byte tag and an 11-byte nonce (so a 4-byte
// length field: messages up to 4 GiB).
type ccm struct {
	block cipher.Block
}

const (
	ccmNonceSize = 11
	ccmTagSize   = 16
	ccmLenSize   = 15 - ccmNonceSize
)

var errOpen = errors.New("message authentication failed")

func newCCM(b cipher.Block) cipher.AEAD { return &ccm{block: b} }

func (c *ccm) NonceSize() int { return ccmNonceSize }
func (c *ccm) Overhead() int  { return ccmTagSize }

// mac is the CBC-MAC of the formatted nonce, additional data and
// plaintext (RFC 3610 section 2.2).
func (c *ccm) mac(nonce, plaintext, ad []byte) [aes.BlockSize]byte {
	var b0 [aes.BlockSize]byte
	flags := byte((ccmTagSize-2)/2<<3 | (ccmLenSize - 1))
	if len(ad) > 0 {
		flags |= 0x40
	}
	b0[0] = flags
	copy(b0[1:], nonce)
	binary.BigEndian.PutUint32(b0[aes.BlockSize-ccmLenSize:], uint32(len(plaintext)))
	var x [aes.BlockSize]byte
	c.block.Encrypt(x[:], b0[:])
	if len(ad) > 0 {
		// ad is shorter than 0xFF00 bytes in SMB (it is the 32 bytes of
		// the transform header), so its length takes two bytes.
		var blk [aes.BlockSize]byte
		binary.BigEndian.PutUint16(blk[:], uint16(len(ad)))
		n := copy(blk[2:], ad)
		c.xorEncrypt(&x, blk[:])
		c.cbcMAC(&x, ad[n:])
	}
	c.cbcMAC(&x, plaintext)
	return x
}

// cbcMAC runs data, zero-padded to whole blocks, through the CBC-MAC x.
func (c *ccm) cbcMAC(x *[aes.BlockSize]byte, data []byte) {
	full := len(data) / aes.BlockSize * aes.BlockSize
	if full > 0 {
		cbc := cipher.NewCBCEncrypter(c.block, x[:])
		var scratch [4096]byte
		for off := 0; off < full; {
			m := min(len(scratch), full-off)
			cbc.CryptBlocks(scratch[:m], data[off:off+m])
			off += m
			if off == full {
				copy(x[:], scratch[m-aes.BlockSize:m])
			}
		}
	}
	if rest := data[full:]; len(rest) > 0 {
		var blk [aes.BlockSize]byte
		copy(blk[:], rest)
		c.xorEncrypt(x, blk[:])
	}
}

func (c *ccm) xorEncrypt(x *[aes.BlockSize]byte, blk []byte) {
	for i := range x {
		x[i] ^= blk[i]
	}
	c.block.Encrypt(x[:], x[:])
}

// ctr returns the keystream generator for counter block i = 1 on, and the
// first keystream block S0 that masks the tag.
func (c *ccm) ctr(nonce []byte) (cipher.Stream, [aes.BlockSize]byte) {
	var a [aes.BlockSize]byte
	a[0] = ccmLenSize - 1
	copy(a[1:], nonce)
	var s0 [aes.BlockSize]byte
	c.block.Encrypt(s0[:], a[:])
	a[aes.BlockSize-1] = 1
	return cipher.NewCTR(c.block, a[:]), s0
}

func (c *ccm) Seal(dst, nonce, plaintext, ad []byte) []byte {
	if len(nonce) != ccmNonceSize || uint64(len(plaintext)) > 1<<32-1 {
		panic("seal: bad nonce or message length for CCM")
	}
	tag := c.mac(nonce, plaintext, ad)
	stream, s0 := c.ctr(nonce)
	ret, out := sliceForAppend(dst, len(plaintext)+ccmTagSize)
	stream.XORKeyStream(out[:len(plaintext)], plaintext)
	for i := range tag {
		out[len(plaintext)+i] = tag[i] ^ s0[i]
	}
	return ret
}

func (c *ccm) Open(dst, nonce, ciphertext, ad []byte) ([]byte, error) {
	if len(nonce) != ccmNonceSize || len(ciphertext) < ccmTagSize {
		return nil, errOpen
	}
	n := len(ciphertext) - ccmTagSize
	stream, s0 := c.ctr(nonce)
	ret, out := sliceForAppend(dst, n)
	stream.XORKeyStream(out, ciphertext[:n])
	tag := c.mac(nonce, out, ad)
	for i := range tag {
		tag[i] ^= s0[i]
	}
	if subtle.ConstantTimeCompare(tag[:], ciphertext[n:]) != 1 {
		clear(out)
		return nil, errOpen
	}
	return ret, nil
}

// sliceForAppend extends in by n bytes, returning the whole slice and the
// new part.
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return
}
