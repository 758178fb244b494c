package localnames

import (
	"io"
	"net/netip"
)

// NewPool is the pool of this system: on Windows, any 127.x.y.z
// answers on loopback.
func NewPool() *Pool { return blockPool() }

// claimAddress claims addr by binding UDP port claimPort on it.
func claimAddress(addr netip.Addr) (io.Closer, error) { return claimByUDP(addr) }

// claimHolders says what holds the addresses a run cannot claim: Windows
// also refuses a UDP port in a range it reserves (Hyper-V, WSL, Docker
// Desktop reserve ranges at boot), on every address.
const claimHolders = "other plug runs or other programs hold UDP port 65535 on them (netstat -ano -p udp | findstr :65535 lists them with their process ids), or Windows reserves that port (netsh interface ipv4 show excludedportrange protocol=udp lists the reserved ranges; a restart of Windows, or of the service that reserved it, frees it)"
