// Package providers registers nodeshepherd's built-in cloud providers (fake,
// webhook) in k8s.io/cloud-provider's registry and builds the one selected
// by the flags. An out-of-tree provider is compiled in by importing its
// package (which registers itself) next to this one.
package providers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
)

// Builtins are the providers that ship with nodeshepherd.
var Builtins = []string{fake.ProviderName, webhook.ProviderName}

// Options select and configure the cloud provider.
type Options struct {
	Name           string
	ConfigFile     string
	WebhookURL     string
	WebhookCAFile  string
	WebhookTimeout time.Duration
}

// AddFlags registers the provider flags (--cloud-provider and --cloud-config
// as kube-controller-manager names them).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "cloud-provider", o.Name, "Cloud provider the cloudnodelifecycle controller asks about machines: "+strings.Join(Builtins, " or ")+" (or one compiled in); empty turns the controller off.")
	fs.StringVar(&o.ConfigFile, "cloud-config", o.ConfigFile, "Configuration file of a compiled-in cloud provider.")
	fs.StringVar(&o.WebhookURL, "cloud-provider-webhook-url", o.WebhookURL, "HTTPS endpoint of the webhook cloud provider (see docs/cloud-provider-webhook.md).")
	fs.StringVar(&o.WebhookCAFile, "cloud-provider-webhook-ca-file", o.WebhookCAFile, "PEM bundle of the CAs that sign the webhook's certificate (default: the system's).")
	fs.DurationVar(&o.WebhookTimeout, "cloud-provider-webhook-timeout", 5*time.Second, "Timeout of one webhook question; a timeout is an error, never an answer.")
}

// Build registers the built-ins and returns the configured provider,
// initialized with a client when restConfig is given. It runs at start-up,
// so a configuration error stops the process.
func (o *Options) Build(restConfig *rest.Config) (cloudprovider.Interface, error) {
	fake.Register()
	webhook.Register()
	if !cloudprovider.IsCloudProvider(o.Name) {
		return nil, fmt.Errorf("unknown --cloud-provider %q; built in: %s", o.Name, strings.Join(Builtins, ", "))
	}
	var config io.Reader
	switch {
	case o.Name == webhook.ProviderName:
		b, _ := json.Marshal(webhook.Config{URL: o.WebhookURL, CAFile: o.WebhookCAFile, Timeout: o.WebhookTimeout})
		config = bytes.NewReader(b)
	case o.ConfigFile != "":
		f, err := os.Open(o.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("--cloud-config: %w", err)
		}
		defer f.Close()
		config = f
	}
	cloud, err := cloudprovider.GetCloudProvider(o.Name, config)
	if err != nil {
		return nil, err
	}
	if restConfig != nil {
		cloud.Initialize(clientBuilder{restConfig}, nil)
	}
	return cloud, nil
}

// clientBuilder gives providers a client with the controller's credentials.
type clientBuilder struct{ cfg *rest.Config }

func (b clientBuilder) Config(name string) (*rest.Config, error) {
	return rest.AddUserAgent(rest.CopyConfig(b.cfg), name), nil
}

func (b clientBuilder) ConfigOrDie(name string) *rest.Config {
	return rest.AddUserAgent(rest.CopyConfig(b.cfg), name)
}

func (b clientBuilder) Client(name string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(b.ConfigOrDie(name))
}

func (b clientBuilder) ClientOrDie(name string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(b.ConfigOrDie(name))
}
