// Command kubemark is upstream's hollow node (k8s.io/kubernetes/cmd/kubemark):
// the real kubelet code with a fake container runtime, registered as a Node,
// built from the Go module proxy at the control plane's version, for
// rehearsals on real kubelet code beside the fake nodes (issue 47).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubemark/app"
)

func main() { os.Exit(cli.Run(app.NewHollowNodeCommand())) }
