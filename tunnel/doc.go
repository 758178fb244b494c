// Package tunnel is plug's spine: the agent's SSH server in the cluster
// (Agent) and the CLI's client (Connect, Session), on golang.org/x/crypto/ssh.
//
// Developers authenticate by public key; the key's SHA256 fingerprint is
// who they are. Standard SSH does the work wherever it has a word for it, so
// that plain OpenSSH is a working client:
//
//	ssh -p 2222 -L 8080:web:80 me@agent           reach the cluster's web:80 on local 8080
//	ssh -p 2222 -R web:80:localhost:3000 me@agent  serve local 3000 as web:80 in the cluster
//
// direct-tcpip channels are dialled through the Platform; a tcpip-forward
// request whose bind address is a cluster name (a DNS-1035 label) publishes
// it with Platform.Serve, and each caller arrives on a forwarded-tcpip
// channel naming that name and port.
//
// What SSH has no word for travels on plug's control channel ("control@plug",
// see control.go): the run's identity in a hello, the agent's welcome, names
// served, events, a run ended by the agent, the goodbye, and the catalog: the
// names the run can consume (Platform.WatchNames), sent whole at once and
// then, to a CLI that says it takes them, only the names that changed
// (catalog_feed.go; Session.Catalog; Session.Carry joins a local connection to
// one of them). A run outlives a
// dropped connection for the agent's grace period: the CLI reconnects, says
// hello with the same run id and key, asks for its names again, and keeps
// them without a second takeover.
//
// The user "get" needs no key and may only fetch the installer and the CLI
// binaries (package tunnel/handout serves them):
//
//	ssh -p 2222 get@agent install | sh -s -- HOST PORT
//	ssh -p 2222 get@agent install-windows | bash -s -- HOST PORT
//	ssh -p 2222 get@agent download linux-amd64 >plug
//	ssh -p 2222 get@agent sha256 linux-amd64
//
// Keepalives run both ways: three unanswered keepalive@openssh.com requests,
// five seconds apart, and the connection is closed.
package tunnel
