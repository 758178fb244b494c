// Package seal encrypts and decrypts SMB 3.x messages behind their
// transform header, with AES-128-CCM, AES-128-GCM and the AES-256 variants.
// The standard library has GCM; CCM (RFC 3610, 16-byte tag, 11-byte
// nonce as SMB uses it) is here.
package seal
