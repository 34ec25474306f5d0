// Command etcd is the real etcd server, built from the Go module proxy for
// nodeshepherd's local control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
