package tunnel

import "golang.org/x/crypto/ssh"

// The SSH algorithms the agent offers and the CLI accepts: only those a
// security audit passes. Key exchange: the hybrid post-quantum
// mlkem768x25519-sha256, then curve25519-sha256 (no NIST curves, no
// finite-field groups, nothing with SHA-1). Ciphers: AES-GCM and
// chacha20-poly1305, which authenticate what they encrypt; MACs (offered
// for completeness, unused with those ciphers): only the
// encrypt-then-MAC ones. Developers' keys may sign with Ed25519, ECDSA or
// RSA with SHA-2, never SHA-1. OpenSSH 8.5 and newer have all of them.
var (
	keyExchanges = []string{ssh.KeyExchangeMLKEM768X25519, ssh.KeyExchangeCurve25519}
	ciphers      = []string{ssh.CipherAES128GCM, ssh.CipherAES256GCM, ssh.CipherChaCha20Poly1305}
	macs         = []string{ssh.HMACSHA256ETM, ssh.HMACSHA512ETM}
	keyAuthAlgos = []string{
		ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519,
		ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoSKECDSA256,
		ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256,
	}
)

// strongAlgorithms is the ssh.Config of both ends: the algorithms above.
func strongAlgorithms() ssh.Config {
	return ssh.Config{KeyExchanges: keyExchanges, Ciphers: ciphers, MACs: macs}
}
