// Command etcd is a plain etcd server, built from the same go.etcd.io/etcd
// module version k8s.io/apiserver uses, for the local control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
