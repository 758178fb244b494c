package cli

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"plug/smb"
)

// smbUsage is the usage of plug smb.
const smbUsage = `Usage: plug smb [--addr ADDR] --share NAME DIR

Serves DIR as the SMB share NAME (\\HOST\NAME), for the SMB clients every
desktop has: Windows Explorer and net use, macOS Finder, Linux mount.cifs
and smbclient. SMB 2.0.2 to 3.1.1; every session is signed; clients that
encrypt get encryption. Files are read and written as the uid and gid plug
runs as. It runs on Linux.

  --addr ADDR    the address to listen on, default :1445
  --share NAME   the share's name: letters, digits, '-', '_' and '.'
  --as-owner     first become the owner (uid and gid) of DIR: for a plug
                 started as root with the capabilities SETUID and SETGID
                 alone (the volume helper of a workload that runs as root)

The one user name and password accepted come from the environment, never
from the command line:

  PLUG_SMB_USER      the user name
  PLUG_SMB_PASSWORD  the password (NTLMv2; guest and anonymous are refused)

What a client gets:

- SMB 2.0.2, 2.1, 3.0, 3.0.2 and 3.1.1, the highest both sides speak; every
  session is signed (HMAC-SHA256, AES-128-CMAC or AES-128-GMAC), and a client
  that encrypts (smbclient --option=clientsmbencrypt=required, or a share
  mapped with encryption required) gets AES-128/256-GCM or -CCM.
- Guest, anonymous and NTLMv1 logons are refused, and so is an unsigned
  request on a signed session.
- Files are created as the uid and gid plug smb runs as, mode 0666 and
  directories 0777 less its umask: what a client saves is owned like what a
  process of that uid writes.
- Every name is resolved beneath DIR (openat2 with RESOLVE_BENEATH): ..,
  absolute names and symbolic links that lead out of DIR are refused; links
  that stay inside work. A link that leads out of DIR or nowhere (made in the
  pod) is listed as an empty file that cannot be read, and can be renamed and
  deleted; deleting any link deletes the link, never what it leads to.
- Names are case-insensitive and case-preserving, as Windows and macOS clients
  expect: README.txt opens Readme.TXT, creating readme.txt beside it opens
  (or, with "create new", collides with) that file, and a file keeps the case
  it was created or renamed with. Case is compared by Unicode simple case
  folding. Where the pod made names that differ only in case, the one spelled
  exactly as asked wins, else the first in byte order. A name spelled as on
  disk costs one lookup; another spelling reads its directory (about 5 ms in a
  directory of 10,000 entries, see deploy/README.md). The read-only attribute
  is the owner's write bit; the other attributes a client sets (hidden,
  system, archive, sparse...) and a creation time it sets are kept in the
  extended attribute user.plug.dos where the file system has user xattrs
  (otherwise they are not kept), and names starting with a dot are hidden
  until a client says otherwise. A security descriptor is made up from the
  mode and owner; setting one is accepted and changes nothing (there is no ACL
  storage).
- Byte-range locks, oplocks (broken when another open needs the file, the open
  waiting for the holder's answer), change notification (of changes made
  through the share, and of names the pod adds, removes and renames, seen by
  inotify and told 50 ms after inotify reports them; deleting a directory
  another client watches tells that client, and the directory goes at once,
  so that its name can be made again, as npm does, unless a client holding
  it could still cancel the delete: it has DELETE access), server-side copy
  (FSCTL_SRV_COPYCHUNK), sparse files and compounded requests work.
- A rename over a file other clients have open replaces it, as on a local
  disk (an editor's atomic save): their handles keep the old file and lose
  their oplocks and leases. Where one of them refuses deletion (opened
  without FILE_SHARE_DELETE) it is refused, as Windows refuses it. A file
  whose delete is pending can be renamed over even without
  replace-if-exists (libsmbclient renames over a file by deleting it first).
  A handle opened to append may read the file's attributes (all
  information): libsmbclient asks them to find the end.
- Leases (v1 and v2) on files, granted and broken by Windows' rules; a client
  is told at once when another client's open, write or lock means its cache
  must go. Directories are not leased: a client lists a directory again.
- Durable handles (v1, v2) and resilient opens: a file open with a batch
  oplock or a handle-caching lease, and the locks it holds, outlive a dropped
  connection, and the client takes them back when it reconnects: for 60 s
  by default, up to 5 minutes when the client asks. Persistent handles,
  directory leases and multichannel are not offered: clients work without
  them.
- A name the pod made with a character Windows cannot use (" * : < > ? \ |,
  control characters) or a byte that is not UTF-8 is shown with the
  private-use character macOS and Samba's catia use in its place, and opens,
  renames and creates the same name on disk. Every name has an 8.3 short
  name (RE7915~1.TXT) that opens it.
- Alternate data streams (file:name) and extended attributes are kept in
  user xattrs of their file where the file system has them (at most 64 KiB
  each); where it has none, streams are not announced and EAs are refused.
- The last write time moves as on Windows: two seconds after an open's first
  write, and at its close; a time a client sets stays through its later
  writes.

It logs one line per session on stderr (user name, workstation, address,
dialect) and one per refused logon, the peer's strings quoted and escaped;
never a file's name or contents. What one client can make it spend is capped
(connections, message size, credits, open files, pending requests): the caps
are listed in deploy/README.md (The SMB helper).

How it compares with Samba on smbtorture's SMB2 suites, and its throughput
next to Samba's, is measured by testdata/smb/torture.sh and
testdata/smb/bench.sh (as root; both start Samba on loopback beside it); the
last results are in testdata/smb/RESULTS.md.
SIGTERM or SIGINT stop it.

Example:
  PLUG_SMB_USER=me PLUG_SMB_PASSWORD=... plug smb --share data /srv/data
  smbclient //127.0.0.1/data -p 1445 -U me
`

// runSmb is plug smb.
func runSmb(c *cli, args []string) error {
	fs := flags("smb")
	addr := fs.String("addr", ":1445", "")
	share := fs.String("share", "", "")
	asOwner := fs.Bool("as-owner", false, "")
	pos, err := c.parse("smb", fs, args, true)
	if err != nil {
		return err
	}
	switch {
	case *share == "":
		return usageError("smb", "smb: give the share's name with --share NAME")
	case len(pos) != 1:
		return usageError("smb", "smb: give one directory to serve, not %d arguments", len(pos))
	}
	if err := smb.ValidShareName(*share); err != nil {
		return usageError("smb", "smb: %v", err)
	}
	user, password := os.Getenv("PLUG_SMB_USER"), os.Getenv("PLUG_SMB_PASSWORD")
	if user == "" || password == "" {
		return &exitCode{ExitUsage, errors.New("smb: set PLUG_SMB_USER and PLUG_SMB_PASSWORD to the user name and password clients log in with (they are never taken from the command line)")}
	}
	if st, err := os.Stat(pos[0]); err != nil {
		return fmt.Errorf("smb: the directory to serve: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("smb: %s is not a directory", pos[0])
	}
	logger := log.New(c.stderr, "plug ", log.LstdFlags)
	if *asOwner {
		uid, gid, err := becomeOwner(pos[0])
		if err != nil {
			return fmt.Errorf("smb: --as-owner: %w", err)
		}
		logger.Printf("smb: serving as uid %d gid %d, the owner of %s", uid, gid, pos[0])
	}
	srv, err := smb.New(smb.Config{Share: *share, Dir: pos[0], User: user, Password: password, Logf: logger.Printf})
	if err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("smb: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	logger.Printf("smb: serving %s as share %s on %s", pos[0], *share, l.Addr())
	return srv.Serve(l)
}
