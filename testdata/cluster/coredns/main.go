// Command coredns is CoreDNS with only the plugins the test cluster's DNS
// needs, so it builds quickly and its image holds nothing else.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives lists the compiled-in plugins in the order upstream's
// plugin.cfg gives them; CoreDNS runs a server block's plugins in this order.
var directives = []string{
	"reload", "ready", "health", "errors", "log", "loadbalance",
	"cache", "hosts", "kubernetes", "loop", "forward",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
