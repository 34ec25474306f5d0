// Command kube-controller-manager is upstream's kube-controller-manager, built
// from the Go module proxy; nodeshepherd runs it with the controllers it
// replaces disabled, or with them enabled for side-by-side comparisons.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }
