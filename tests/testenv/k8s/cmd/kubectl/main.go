// Command kubectl is the upstream Kubernetes CLI, built from the Go module
// proxy for clusterset-dns install tests and tutorials.
//
// It mirrors k8s.io/kubernetes/cmd/kubectl/kubectl.go (the upstream main
// package cannot be imported). Build it with scripts/testenv-build.sh.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Client auth plugins (exec, OIDC) as the upstream binary has them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Pretty-print the error and exit with an error.
		util.CheckErr(err)
	}
}
