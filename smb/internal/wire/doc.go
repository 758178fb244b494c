// Package wire is the encoding of SMB2 messages: the 64-byte header, the
// transform header of encrypted messages, the Direct TCP framing, the
// command and status numbers, and the small encodings the messages share
// (UTF-16LE strings, FILETIME, 8-byte alignment).
//
// Decoders here take a byte slice that came from a peer and check every
// length and offset before use: they return an error, never panic, on any
// input.
package wire
