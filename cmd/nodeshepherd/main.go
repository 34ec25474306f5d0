// Command nodeshepherd is the Kubernetes node-lifecycle system; see README.md.
package main

import (
	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd"
)

func main() { cli.Run(cmd.NewRootCommand()) }
