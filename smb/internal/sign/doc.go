// Package sign computes and checks the signatures of SMB2 messages
// (HMAC-SHA256 for the 2.x dialects, AES-128-CMAC for 3.x, AES-128-GMAC
// when 3.1.1 negotiates it) and derives the session's keys with the
// SP800-108 counter-mode KDF the 3.x dialects use.
package sign
