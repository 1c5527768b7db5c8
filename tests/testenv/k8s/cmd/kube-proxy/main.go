// Command kube-proxy is the upstream Kubernetes service proxy, built from the
// Go module proxy for clusterset-dns integration tests: it runs inside each
// test node's network namespace and programs ClusterIPs (derived clusterset
// IPs among them) with nftables, as on a real node.
//
// It mirrors k8s.io/kubernetes/cmd/kube-proxy/proxy.go (the upstream main
// package cannot be imported). Build it with scripts/testenv-build.sh.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go prometheus plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	command := app.NewProxyCommand()
	code := cli.Run(command)
	os.Exit(code)
}
