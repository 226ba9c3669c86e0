// CoreDNS for the real node's cluster DNS (scripts/control-plane.sh up --node), built with only
// the plugins the node's Corefile uses. CoreDNS's documented way to pick plugins at compile time
// is a main package that imports them and sets the directive order; the released binary links
// every plugin (cloud DNS providers included), which would triple the build for nothing here.
// Test infrastructure only: nothing in Go ships in the image.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order plugins run in, as in CoreDNS's plugin.cfg, restricted to the ones linked here.
	dnsserver.Directives = []string{"ready", "errors", "log", "kubernetes"}
}

func main() {
	coremain.Run()
}
