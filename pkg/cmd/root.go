// Package cmd assembles the nodeshepherd command tree; each subcommand lives
// in a package of its own under pkg/cmd.
package cmd

import (
	goflag "flag"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/demo"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/explain"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/fakenodes"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/hollownodes"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/run"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/scenario"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/simulate"
)

// NewRootCommand returns the nodeshepherd command.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "nodeshepherd",
		Short: "Kubernetes node lifecycle: health, taints, evictions, drains, and rehearsals of node failures",
		Long: `nodeshepherd watches Kubernetes nodes and acts when they fail: it marks silent nodes
Unknown, taints and evicts, drains nodes that report trouble, and lets you rehearse
failures on a real local control plane with fake nodes before they happen in production.`,
	}
	// klog's flags (-v, --vmodule, ...) for structured logs on stderr.
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	for _, name := range []string{"v", "vmodule"} {
		root.PersistentFlags().AddGoFlag(fs.Lookup(name))
	}
	root.AddCommand(newVersionCommand(), simulate.NewCommand(), run.NewCommand(), config.NewCommand(), controlplane.NewCommand(), fakenodes.NewCommand(), hollownodes.NewCommand(), demo.NewCommand(), explain.NewCommand(), scenario.NewCommand())
	// Installed as kubectl-shepherd (a link to this binary), kubectl runs it
	// for "kubectl shepherd ..."; help and errors then name that command.
	if PluginName(os.Args[0]) {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl shepherd"}
	}
	return root
}

// PluginName reports whether argv0 is the kubectl plugin's name,
// kubectl-shepherd (kubectl finds plugins on $PATH by that prefix).
func PluginName(argv0 string) bool {
	return strings.TrimSuffix(filepath.Base(argv0), ".exe") == "kubectl-shepherd"
}
