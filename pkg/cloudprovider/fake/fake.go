// Package fake is the "fake" cloud provider: it answers from the machine
// states that `nodeshepherd fakenodes` and hollow nodes publish (faults
// machine-delete, machine-shutdown and machine-start) in a ConfigMap, and
// its repair requests are carried out by them (Carrier), so that the cloud node
// lifecycle controller can be tested and rehearsed without a cloud.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
)

// ProviderName is the --cloud-provider value.
const ProviderName = "fake"

// Where machine states live: one key per node whose machine is not simply
// running; a missing key means running.
const (
	ConfigMapNamespace = "kube-system"
	ConfigMapName      = "nodeshepherd-fake-cloud"
)

// Machine states.
const (
	Running  = "running"
	Shutdown = "shutdown"
	Deleted  = "deleted"
	// Error makes every question about the machine fail, to test that
	// provider errors never delete anything.
	Error = "error"
)

var registerOnce sync.Once

// Register adds the provider to k8s.io/cloud-provider's registry.
func Register() {
	registerOnce.Do(func() {
		cloudprovider.RegisterCloudProvider(ProviderName, func(io.Reader) (cloudprovider.Interface, error) { return &Provider{}, nil })
	})
}

// Provider is the fake cloud.
type Provider struct {
	nscloud.Base
	client kubernetes.Interface
}

var _ cloudprovider.Interface = (*Provider)(nil)
var _ cloudprovider.InstancesV2 = (*Provider)(nil)

// Initialize takes the client the provider reads machine states with.
func (p *Provider) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	p.client = b.ClientOrDie("nodeshepherd-fake-cloud")
}

func (p *Provider) ProviderName() string { return ProviderName }

func (p *Provider) InstancesV2() (cloudprovider.InstancesV2, bool) { return p, true }

func (p *Provider) state(ctx context.Context, node *v1.Node) (string, error) {
	if p.client == nil {
		return "", fmt.Errorf("fake cloud provider not initialized")
	}
	cm, err := p.client.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Running, nil
	}
	if err != nil {
		return "", fmt.Errorf("reading machine states: %w", err)
	}
	switch s := cm.Data[node.Name]; s {
	case "", Running:
		return Running, nil
	case Shutdown, Deleted:
		return s, nil
	case Error:
		return "", fmt.Errorf("machine of node %s: injected provider error", node.Name)
	default:
		return "", fmt.Errorf("machine of node %s: unknown state %q", node.Name, s)
	}
}

// InstanceExists is false only for a deleted machine.
func (p *Provider) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	s, err := p.state(ctx, node)
	return s != Deleted, err
}

// InstanceShutdown is true for a shut-down machine.
func (p *Provider) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	s, err := p.state(ctx, node)
	return s == Shutdown, err
}

// InstanceMetadata describes the fake machine from the node's own labels.
func (p *Provider) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	if _, err := p.state(ctx, node); err != nil {
		return nil, err
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID: "fake://" + node.Name, InstanceType: "fake", NodeAddresses: node.Status.Addresses,
		Zone: node.Labels[v1.LabelTopologyZone], Region: node.Labels[v1.LabelTopologyRegion],
	}, nil
}

// New returns the provider reading and writing through client, for callers
// outside the cloud-provider registry (tests, simulate).
func New(client kubernetes.Interface) *Provider { return &Provider{client: client} }

// Publish writes machine states where the provider reads them: one key
// per node of states, a state of "" or Running deleting the node's key
// (a missing key means running). Keys of other nodes are left as they are,
// so that each process that runs machines (fake nodes, hollow nodes)
// publishes its own.
func Publish(ctx context.Context, client kubernetes.Interface, states map[string]string) error {
	data := map[string]any{}
	for name, s := range states {
		if s == "" || s == Running {
			data[name] = nil // a JSON merge patch deletes the key
		} else {
			data[name] = s
		}
	}
	cms := client.CoreV1().ConfigMaps(ConfigMapNamespace)
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	_, err = cms.Patch(ctx, ConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: ConfigMapNamespace}, Data: map[string]string{}}
		for k, v := range data {
			if s, ok := v.(string); ok {
				cm.Data[k] = s
			}
		}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = cms.Patch(ctx, ConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("publishing machine states in %s/%s: %w", ConfigMapNamespace, ConfigMapName, err)
	}
	return nil
}
