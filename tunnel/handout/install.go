package handout

import (
	_ "embed"
	"io"
	"net"
	"strings"
	"text/template"

	"golang.org/x/crypto/ssh"
)

//go:embed install.sh.tmpl
var installScript string

var installTemplate = template.Must(template.New("install").
	Funcs(template.FuncMap{"quote": shellQuote}).
	Parse(installScript))

// installerData fills install.sh.tmpl.
type installerData struct {
	Host, Port string // the address developers reach the agent by; may be empty
	How        string // how the agent found Host and Port itself; may be empty
	HostKey    string // the agent's host key, as an authorized_keys line
	Version    string
	Command    string // the get command that served the script
	Shell      string // the shell it is piped to
	From       string // the IP address the connection that fetched the script came from
}

// writeInstaller writes the installer: for macOS and Linux piped to sh, or
// for Git Bash on Windows piped to bash. It knows the agent's host key, so
// the binary it downloads and the profile it creates are pinned to it, and
// the address from which its own connection (from) came: the installer
// warns when the address it is to pin reaches the agent another way.
func (s *Server) writeInstaller(w io.Writer, from net.Addr, windows bool) error {
	d := installerData{
		From:    sourceIP(from),
		HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostKey))),
		Version: s.Version,
		Command: "install",
		Shell:   "sh",
	}
	if windows {
		d.Command, d.Shell = "install-windows", "bash"
	}
	if host, port, err := net.SplitHostPort(s.PublicAddr); err == nil {
		d.Host, d.Port, d.How = host, port, s.PublicAddrHow
	}
	return installTemplate.Execute(w, d)
}

// sourceIP is the IP address of a connection's source, which the
// installer compares: its port differs from one connection to the next.
func sourceIP(addr net.Addr) string {
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
