// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3, at the
// version k8s.io/kubernetes pins), built from the Go module proxy for
// clusterset-dns integration tests. Same entry point as upstream server/main.go.
// Build it with scripts/testenv-build.sh.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
