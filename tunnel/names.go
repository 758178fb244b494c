package tunnel

import (
	"fmt"
	"strconv"
)

// nameForm is the accepted form of a served name, quoted by every refusal.
const nameForm = "a name is 1 to 63 lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (e.g. my-service)"

// CheckName reports whether name can be served in a cluster: a DNS-1035
// label, the form Kubernetes Service names and Swarm aliases share.
// "localhost" is refused: it is what `ssh -R` sends when no name is given.
func CheckName(name string) error {
	if name == "" || name == "localhost" {
		return fmt.Errorf("no cluster name given: forward NAME:PORT:localhost:LOCALPORT, e.g. ssh -R my-service:8080:localhost:3000; %s", nameForm)
	}
	if len(name) > 63 || !isLower(name[0]) || name[len(name)-1] == '-' {
		return fmt.Errorf("%q is not a valid cluster name: %s", name, nameForm)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isLower(c) && !isDigit(c) && c != '-' {
			return fmt.Errorf("%q is not a valid cluster name: %s", name, nameForm)
		}
	}
	return nil
}

// CheckPort reports whether port is a TCP port a name can be served on.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %s is out of range: a port is 1 to 65535", strconv.Itoa(port))
	}
	return nil
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
