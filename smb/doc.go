// Package smb is an SMB 2/3 file server: it serves one directory as one
// share to the clients every desktop has (Windows Explorer and net use,
// macOS Finder, Linux mount.cifs and smbclient), for plug's volume helper.
//
// It speaks the dialects 2.0.2, 2.1, 3.0, 3.0.2 and 3.1.1 (the highest the
// client offers wins; 3.1.1 with its preauthentication integrity hash,
// SHA-512), authenticates one user with NTLMv2 in SPNEGO (package
// smb/ntlm), signs with HMAC-SHA256, AES-128-CMAC or AES-128-GMAC, and
// encrypts with AES-128/256-CCM or -GCM for clients that encrypt
// (packages smb/internal/sign and smb/internal/seal).
//
// # Files
//
// Every path a client names is resolved beneath the share's root with
// openat2(RESOLVE_BENEATH): a symbolic link is followed only while it stays
// inside the root; one that leads out, an absolute name, or a ".." is
// refused. A link itself is what an open acts on when it asks for the
// reparse point, asks for delete access without data access, or when the
// link leads out or nowhere: it is listed as an empty file, gives no
// access to data or attributes, and can be renamed and deleted. Names are
// checked against the characters Windows forbids; names on disk that hold
// them (or bytes that are not UTF-8) are shown with private use characters
// in their place, which lead back to the same names (see name.go).
// Files are created with the server process's uid and gid, mode 0666 and
// directories 0777, less the process umask. Names are case-insensitive
// and case-preserving (see fold.go: Unicode simple case folding; of names
// on disk that differ only in case, the exact spelling wins, else the
// first in byte order).
// The read-only attribute is the owner's write bit; the other DOS
// attributes and a creation time a client sets live in the user.plug.dos
// xattr (by default a leading dot means hidden). A security descriptor is
// synthesised from the mode and owner; the parts a client sets are kept
// in the user.plug.sd xattr and read back, but what guards the file is its
// mode, never a kept DACL (see sd.go). Named streams live in user
// xattrs (see stream.go), extended attributes too (ea.go); every name
// has an 8.3 short name that opens it (shortname.go). The last write time
// moves as on Windows (see writetime.go): late after an open's first
// write, at its close, and not at all through an open the client set it
// on. Oplocks and leases (v1 and v2, on files and named streams) are
// granted and broken by Windows' rules, with break notifications to every
// client that holds one (see oplock.go and lease.go); an open with a batch
// oplock or a handle-caching lease is durable when its client asks (v1 and
// v2 durable handles) and any open resilient when it asks, so it outlives
// a lost connection for its timeout (see durable.go). Directory leases,
// persistent handles and multichannel are not offered. No quotas are
// kept; NTFS's quota file, which Windows and Samba open on every share,
// opens for reading only (see quota.go). No snapshots are kept either: a
// client asking for a file's previous versions is told there are none.
//
// # Limits
//
// What a peer can make the server spend is capped:
//
//   - connections logged in at once: Config.MaxConns (default 32); a
//     logon past that is refused with STATUS_REQUEST_NOT_ACCEPTED
//   - connections not yet logged in: maxUnauthed (8), each with
//     handshakeTimeout (10 s) to log on; a ninth closes the one that has
//     waited longest, so connections that never log on cannot keep a
//     client out
//   - a message: MaxIOSize (1 MiB) of data plus 64 KiB; a longer transport
//     frame closes the connection
//   - credits a client holds: maxCredits (8192), so at most that many
//     requests outstanding (they cost no memory of their own: see the next)
//   - reads and writes in progress per connection: maxIO (8); the
//     connection is not read while they are all busy
//   - the responses of a compound chain: one large buffer (1.07 MiB); the
//     responses that fill it are sent as a compound of their own before
//     the next (MS-SMB2 3.3.4.1.3), however long the chain
//   - large buffers (1.07 MiB: a frame over 64 KiB, a READ's response, a
//     chain's responses past 64 KiB) in use at once, server-wide:
//     Config.MaxConns + maxUnauthed + maxIO (48); a connection that needs
//     one when none is free waits and is not read meanwhile. The other
//     buffers are 64 KiB: maxIO + 2 per connection at most, and one per
//     asynchronous response or oplock break being sent
//   - a response not taken by the client within writeTimeout (30 s)
//     closes the connection
//   - open files per connection: maxOpens (16384)
//   - sessions per connection: maxSessions (16); tree connects per
//     session: maxTrees (64)
//   - directories watched with inotify for CHANGE_NOTIFY, server-wide:
//     maxFSWatches (8192); beyond them changes made on disk are not told
//   - pending CHANGE_NOTIFY and blocking LOCK requests per connection:
//     maxPending (256)
//   - changes the server made, kept for watches whose first CHANGE_NOTIFY
//     arrived before them but is handled after (see watches.catchUp),
//     server-wide: the latest maxRecentChanges (256), each a path of
//     maxPath (4 KiB) at most; a watch that would need one dropped
//     starts with the client told to list the directory again
//   - durable and resilient opens kept for clients that went away,
//     server-wide: maxParked (4096), each for its timeout (durable: 60 s,
//     or what a v2 client asks up to 300 s; resilient: what the client
//     asks up to 300 s, 120 s if it asks none); beyond them an open closes
//     with its connection
//   - leases: one per lease key and file, and a lease lives only while
//     an open holds it, so there are no more than opens
//
// A malformed message gets an error status or, when the stream can no
// longer be trusted (a bad transport frame, a message id outside the
// credit window, an encrypted message that does not decrypt), the
// connection is closed; other connections are not affected.
//
// The server runs on Linux only: New returns an error elsewhere.
package smb
