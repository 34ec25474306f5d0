// Package cli holds what every nodeshepherd subcommand shares: usage errors
// with exit code 2, signal handling, logging flags and kubeconfig loading.
package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// UsageError is bad input from the user: a flag, an argument or a file. main
// exits with code 2 for it, 1 for every other error.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitCode maps an error returned by the root command to a process exit code.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return 2
	}
	// cobra reports unknown subcommands and argument-count errors as plain errors.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "requires exactly", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return 2
		}
	}
	return 1
}

// Run executes the root command and exits with the matching code.
func Run(cmd *cobra.Command) {
	cmd.SilenceErrors = true
	cmd.SilenceUsage = true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
	}
	os.Exit(ExitCode(err))
}

// KubeFlags are the flags for reaching a cluster, as kubectl names them.
type KubeFlags struct {
	Kubeconfig string
	Context    string
	QPS        float32
	Burst      int
	// ContentType is the encoding of requests and the preferred one of
	// answers, as kube-controller-manager's --kube-api-content-type.
	ContentType string
}

// protobuf is the API server's binary encoding: a fraction of JSON's cost
// to encode and decode, for the API server as for us. Built-in types only;
// answers fall back to JSON for anything else.
const protobuf = "application/vnd.kubernetes.protobuf"

// AddFlags registers the flags with the given client rate-limit defaults.
func (k *KubeFlags) AddFlags(fs *pflag.FlagSet, qps float32, burst int) {
	fs.StringVar(&k.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file. Defaults to $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.")
	fs.StringVar(&k.Context, "context", "", "The kubeconfig context to use.")
	fs.Float32Var(&k.QPS, "kube-api-qps", qps, "Queries per second allowed to the API server, shared by every request of this process.")
	fs.IntVar(&k.Burst, "kube-api-burst", burst, "Burst of requests allowed to the API server above --kube-api-qps.")
	fs.StringVar(&k.ContentType, "kube-api-content-type", protobuf, "Content type of requests sent to the API server: "+protobuf+" or application/json.")
	k.QPS, k.Burst, k.ContentType = qps, burst, protobuf
}

// Validate checks the rate-limit values.
func (k *KubeFlags) Validate() error {
	if !(k.QPS > 0) || math.IsInf(float64(k.QPS), 1) { // NaN fails too
		return Usagef("--kube-api-qps must be greater than 0 and finite, got %v", k.QPS)
	}
	if k.Burst < 1 {
		return Usagef("--kube-api-burst must be at least 1, got %d", k.Burst)
	}
	if k.ContentType != protobuf && k.ContentType != "application/json" {
		return Usagef("--kube-api-content-type must be %s or application/json, got %q", protobuf, k.ContentType)
	}
	return nil
}

// RESTConfig loads the client configuration: the kubeconfig flag, $KUBECONFIG
// and ~/.kube/config as kubectl does, falling back to in-cluster credentials.
func (k *KubeFlags) RESTConfig(userAgent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: k.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w (pass --kubeconfig, set KUBECONFIG, or run in a cluster)", err)
	}
	cfg.QPS, cfg.Burst = k.QPS, k.Burst
	if k.ContentType != "" { // zero KubeFlags (tests) keep client-go's JSON
		cfg.ContentType = k.ContentType
		if k.ContentType == protobuf {
			cfg.AcceptContentTypes = protobuf + ",application/json"
		}
	}
	cfg = rest.AddUserAgent(cfg, userAgent)
	return cfg, nil
}

// Group makes cmd a pure group of subcommands: without arguments it prints
// its help, and an unknown subcommand is a usage error (cobra checks that
// only for the root command).
func Group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return Usagef("unknown command %q for %q; see '%s --help'", args[0], c.CommandPath(), c.CommandPath())
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	return cmd
}

// LogsToFile sends klog's output to path unless -v was given, so that the
// components' logs do not drown a command's progress lines. It returns
// whether it did, and a function that restores stderr logging.
func LogsToFile(cmd *cobra.Command, path string) (bool, func(), error) {
	if f := cmd.Flags().Lookup("v"); f != nil && f.Changed {
		return false, func() {}, nil
	}
	logFile, err := os.Create(path)
	if err != nil {
		return false, nil, err
	}
	klog.LogToStderr(false)
	klog.SetOutput(logFile)
	return true, func() { klog.LogToStderr(true); logFile.Close() }, nil
}
