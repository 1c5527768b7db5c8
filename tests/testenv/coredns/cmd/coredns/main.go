// Command coredns is the standard CoreDNS binary (the default plugin set from
// core/plugin, including kubernetes with its multicluster option), built from
// the Go module proxy for clusterset-dns integration tests. Same entry point as
// upstream coredns.go. Build it with scripts/testenv-build.sh.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver" // server type and directive order
	_ "github.com/coredns/coredns/core/plugin"    // the default plugin set
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
