package tunneltest

import (
	"errors"
	"net"
	"slices"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// RefuseKeys is a tunnel.Keys that refuses every key, saying why.
func RefuseKeys(why string) tunnel.Keys { return refuseKeys(why) }

type refuseKeys string

func (r refuseKeys) Admit(string, ssh.PublicKey, net.Addr) error { return errors.New(string(r)) }
func (refuseKeys) Oversees(string) bool                          { return false }

// Overseers is a tunnel.Keys that admits every key and lets the keys with
// the listed fingerprints see and end every run.
type Overseers []string

func (o Overseers) Admit(string, ssh.PublicKey, net.Addr) error { return nil }
func (o Overseers) Oversees(fp string) bool                     { return slices.Contains(o, fp) }
