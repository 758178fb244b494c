// Package ntlm is the server side of NTLMv2 authentication (MS-NLMP)
// wrapped in SPNEGO (RFC 4178, MS-SPNG), as SMB2 SESSION_SETUP carries it.
//
// An Acceptor checks one client against one user name and password. It
// accepts only NTLMv2 responses: NTLMv1, LM, anonymous and guest logons
// are refused. Its result is the user's name and the exported session key
// the SMB layer derives its signing and encryption keys from.
//
// Every message is parsed from untrusted bytes: lengths and offsets are
// checked before use and a malformed message is an error, never a panic.
package ntlm
