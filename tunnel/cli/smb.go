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

It logs one line per session on stderr (the user name and the address it
came from), never a file's name or contents. SIGTERM or SIGINT stop it.

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
