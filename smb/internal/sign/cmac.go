package sign

import (
	"crypto/aes"
	"crypto/cipher"
)

// cmac is AES-CMAC (RFC 4493).
type cmac struct {
	block  cipher.Block
	k1, k2 [aes.BlockSize]byte
}

func newCMAC(key []byte) (*cmac, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	c := &cmac{block: b}
	var l [aes.BlockSize]byte
	b.Encrypt(l[:], l[:])
	c.k1 = double(l)
	c.k2 = double(c.k1)
	return c, nil
}

// double is multiplication by x in GF(2^128) as CMAC defines it.
func double(in [aes.BlockSize]byte) [aes.BlockSize]byte {
	var out [aes.BlockSize]byte
	carry := byte(0)
	for i := aes.BlockSize - 1; i >= 0; i-- {
		out[i] = in[i]<<1 | carry
		carry = in[i] >> 7
	}
	if carry != 0 {
		out[aes.BlockSize-1] ^= 0x87
	}
	return out
}

// chunk is how much of a message goes through the CBC encrypter at once.
const chunk = 4096

// sum is the CMAC of msg.
func (c *cmac) sum(msg []byte) [aes.BlockSize]byte {
	var x [aes.BlockSize]byte
	// Every block but the last runs through CBC with a zero IV; its last
	// output block is the running MAC.
	n := len(msg)
	full := 0
	if n > 0 {
		full = (n - 1) / aes.BlockSize * aes.BlockSize
	}
	if full > 0 {
		cbc := cipher.NewCBCEncrypter(c.block, x[:])
		var scratch [chunk]byte
		for off := 0; off < full; {
			m := min(chunk, full-off)
			cbc.CryptBlocks(scratch[:m], msg[off:off+m])
			off += m
			if off == full {
				copy(x[:], scratch[m-aes.BlockSize:m])
			}
		}
	}
	last := msg[full:]
	var m [aes.BlockSize]byte
	copy(m[:], last)
	k := &c.k1
	if len(last) < aes.BlockSize {
		m[len(last)] = 0x80
		k = &c.k2
	}
	for i := range x {
		x[i] ^= m[i] ^ k[i]
	}
	c.block.Encrypt(x[:], x[:])
	return x
}
