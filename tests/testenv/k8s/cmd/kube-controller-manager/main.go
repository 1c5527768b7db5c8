// Command kube-controller-manager is the upstream Kubernetes controller
// manager, built from the Go module proxy for clusterset-dns integration tests.
//
// It mirrors k8s.io/kubernetes/cmd/kube-controller-manager/controller-manager.go
// (the upstream main package cannot be imported). Build it with
// scripts/testenv-build.sh.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob time zone support, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go prometheus plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
