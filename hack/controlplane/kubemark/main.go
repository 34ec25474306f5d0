// Command kubemark is upstream's hollow node (k8s.io/kubernetes/cmd/kubemark):
// the real kubelet code with a fake container runtime, registered as a Node,
// built from the Go module proxy at the control plane's version, for
// rehearsals on real kubelet code beside the fake nodes (issue 47).
//
// One flag is added to upstream's: --boot-id, the boot ID the hollow
// kubelet reports (status.nodeInfo.bootID), which kubemark's fake cAdvisor
// does not have. Without it the command is upstream's, unchanged; with it
// the kubelet morph is composed here from kubemark's exported pieces
// (bootid.go), with the same flags read from upstream's own flag set.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubemark/app"
)

func main() {
	cmd := app.NewHollowNodeCommand()
	withBootID(cmd)
	os.Exit(cli.Run(cmd))
}
