// Package webhook is the "webhook" cloud provider: every question about a
// machine is a JSON POST to an HTTPS endpoint the operator runs, so any
// infrastructure can be plugged in without recompiling. The contract is in
// docs/cloud-provider-webhook.md.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
)

// ProviderName is the --cloud-provider value.
const ProviderName = "webhook"

// APIVersion of the request and response bodies.
const APIVersion = "nodeshepherd.io/v1alpha1"

// Questions, in the request's "question" field.
const (
	QuestionExists   = "InstanceExists"
	QuestionShutdown = "InstanceShutdown"
	QuestionMetadata = "InstanceMetadata"
	// QuestionPoweredOff is the fencing question of the outofservice
	// controller (--out-of-service-fencing-webhook-url): is the machine
	// confirmed powered off?
	QuestionPoweredOff = "PoweredOff"
	// QuestionReboot and QuestionReplace are repair requests of a
	// remediation ladder (nscloud.Repairer): reboot the machine, or replace
	// it by a new one. The answer says whether the provider accepted.
	QuestionReboot  = "Reboot"
	QuestionReplace = "Replace"
	// QuestionPowerOff is the Fence step's request (nscloud.Fencer): power
	// the machine off and keep it off. The answer says whether the
	// provider accepted; that the machine is off is asked afterwards
	// (InstanceShutdown, InstanceExists), for the same boot.
	QuestionPowerOff = "PowerOff"
)

// Config is the provider's configuration, from the --cloud-provider-webhook-* flags.
type Config struct {
	URL     string        `json:"url"`
	CAFile  string        `json:"caFile,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Request is the body POSTed for every question.
type Request struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"` // "InstanceQuestion"
	Question   string      `json:"question"`
	Node       RequestNode `json:"node"`
	// RequestID identifies a repair request (Reboot, Replace, PowerOff): the same ID
	// again is the same request, sent again after its answer was lost.
	RequestID string `json:"requestID,omitempty"`
	// Premise is what a repair request was decided on about the machine
	// ("machineOff": that it is off); the webhook refuses the request
	// ("accepted": false) when it no longer holds. Empty: nothing.
	Premise string `json:"premise,omitempty"`
}

// RequestNode identifies the machine: by providerID when set, else by name.
type RequestNode struct {
	Name       string            `json:"name"`
	ProviderID string            `json:"providerID,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// BootID is the boot the node reports (status.nodeInfo.bootID).
	BootID string `json:"bootID,omitempty"`
}

// Response is the answer; the field named by the question is required.
type Response struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"` // "InstanceAnswer"
	Exists     *bool     `json:"exists,omitempty"`
	Shutdown   *bool     `json:"shutdown,omitempty"`
	PoweredOff *bool     `json:"poweredOff,omitempty"`
	Metadata   *Metadata `json:"metadata,omitempty"`
	// Accepted answers a repair request; Message says why when it is
	// false.
	Accepted *bool  `json:"accepted,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Metadata is the answer to InstanceMetadata.
type Metadata struct {
	ProviderID    string           `json:"providerID"`
	InstanceType  string           `json:"instanceType,omitempty"`
	Zone          string           `json:"zone,omitempty"`
	Region        string           `json:"region,omitempty"`
	NodeAddresses []v1.NodeAddress `json:"nodeAddresses,omitempty"`
}

var registerOnce sync.Once

// Register adds the provider to k8s.io/cloud-provider's registry; its
// configuration is a JSON Config.
func Register() {
	registerOnce.Do(func() {
		cloudprovider.RegisterCloudProvider(ProviderName, func(r io.Reader) (cloudprovider.Interface, error) {
			var c Config
			if r == nil {
				return nil, errors.New("the webhook cloud provider needs --cloud-provider-webhook-url")
			}
			if err := json.NewDecoder(r).Decode(&c); err != nil {
				return nil, fmt.Errorf("webhook cloud provider configuration: %w", err)
			}
			return New(c)
		})
	})
}

// Provider asks the webhook.
type Provider struct {
	nscloud.Base
	url    string
	client *http.Client
}

var _ cloudprovider.InstancesV2 = (*Provider)(nil)

// New validates the configuration: an absolute https URL, a readable PEM CA
// bundle when given, a positive timeout (5s when zero).
func New(c Config) (*Provider, error) { return NewNamed(c, "--cloud-provider-webhook") }

// NewNamed is New for an endpoint configured by other flags (flags is their
// common prefix, e.g. --out-of-service-fencing-webhook): errors name them.
func NewNamed(c Config, flags string) (*Provider, error) {
	u, err := url.Parse(c.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%s-url %q must be an absolute https:// URL", flags, c.URL)
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("%s-timeout must be positive, got %v", flags, c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s-ca-file: %w", flags, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s-ca-file %s holds no PEM certificate", flags, c.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	return &Provider{url: c.URL, client: &http.Client{Timeout: c.Timeout, Transport: &http.Transport{TLSClientConfig: tlsConfig},
		// A redirect is answered as an error, never followed: it could lead
		// from https to http or to another host that decides node deletions.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

func (p *Provider) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (p *Provider) ProviderName() string                                              { return ProviderName }
func (p *Provider) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return p, true }

// ask posts one question and decodes the answer strictly.
func (p *Provider) ask(ctx context.Context, question string, node *v1.Node) (*Response, error) {
	return p.send(ctx, question, node, "", nscloud.NoPremise)
}

// send posts one question or request and decodes the answer strictly.
func (p *Provider) send(ctx context.Context, question string, node *v1.Node, requestID string, premise nscloud.Premise) (*Response, error) {
	body, _ := json.Marshal(Request{APIVersion: APIVersion, Kind: "InstanceQuestion", Question: question, RequestID: requestID, Premise: string(premise),
		Node: RequestNode{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels, BootID: node.Status.NodeInfo.BootID}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("webhook %s for node %s: %w", question, node.Name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("webhook %s for node %s: reading the answer: %w", question, node.Name, err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, fmt.Errorf("webhook %s for node %s: HTTP %s to %q: redirects are not followed; configure the final URL", question, node.Name, resp.Status, resp.Header.Get("Location"))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("webhook %s for node %s: HTTP %s: %.200s", question, node.Name, resp.Status, data)
	}
	out, err := decodeAnswer(data)
	if err != nil {
		return nil, fmt.Errorf("webhook %s for node %s: malformed answer: %w", question, node.Name, err)
	}
	return out, nil
}

// decodeAnswer reads a webhook's answer strictly: one JSON object with
// known fields only.
func decodeAnswer(data []byte) (*Response, error) {
	var out Response
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return &out, nil
}

func (p *Provider) InstanceExists(ctx context.Context, node *v1.Node) (bool, error) {
	r, err := p.ask(ctx, QuestionExists, node)
	if err != nil {
		return false, err
	}
	if r.Exists == nil {
		return false, fmt.Errorf("webhook %s for node %s: malformed answer: no \"exists\" field", QuestionExists, node.Name)
	}
	return *r.Exists, nil
}

func (p *Provider) InstanceShutdown(ctx context.Context, node *v1.Node) (bool, error) {
	r, err := p.ask(ctx, QuestionShutdown, node)
	if err != nil {
		return false, err
	}
	if r.Shutdown == nil {
		return false, fmt.Errorf("webhook %s for node %s: malformed answer: no \"shutdown\" field", QuestionShutdown, node.Name)
	}
	return *r.Shutdown, nil
}

// PoweredOff asks a fencing endpoint whether the node's machine is
// confirmed powered off (QuestionPoweredOff).
func (p *Provider) PoweredOff(ctx context.Context, node *v1.Node) (bool, error) {
	r, err := p.ask(ctx, QuestionPoweredOff, node)
	if err != nil {
		return false, err
	}
	if r.PoweredOff == nil {
		return false, fmt.Errorf("webhook %s for node %s: malformed answer: no \"poweredOff\" field", QuestionPoweredOff, node.Name)
	}
	return *r.PoweredOff, nil
}

func (p *Provider) InstanceMetadata(ctx context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	r, err := p.ask(ctx, QuestionMetadata, node)
	if err != nil {
		return nil, err
	}
	if r.Metadata == nil || r.Metadata.ProviderID == "" {
		return nil, fmt.Errorf("webhook %s for node %s: malformed answer: no \"metadata.providerID\"", QuestionMetadata, node.Name)
	}
	m := r.Metadata
	return &cloudprovider.InstanceMetadata{ProviderID: m.ProviderID, InstanceType: m.InstanceType, Zone: m.Zone, Region: m.Region, NodeAddresses: m.NodeAddresses}, nil
}

var _ nscloud.Repairer = (*Provider)(nil)
var _ nscloud.Fencer = (*Provider)(nil)

// Reboot asks the webhook to reboot the node's machine (QuestionReboot).
func (p *Provider) Reboot(ctx context.Context, node *v1.Node, requestID string, premise nscloud.Premise) error {
	return p.repair(ctx, QuestionReboot, node, requestID, premise)
}

// Replace asks the webhook to replace the node's machine (QuestionReplace).
func (p *Provider) Replace(ctx context.Context, node *v1.Node, requestID string, premise nscloud.Premise) error {
	return p.repair(ctx, QuestionReplace, node, requestID, premise)
}

// PowerOff asks the webhook to power the node's machine off and keep it
// off (QuestionPowerOff).
func (p *Provider) PowerOff(ctx context.Context, node *v1.Node, requestID string, premise nscloud.Premise) error {
	return p.repair(ctx, QuestionPowerOff, node, requestID, premise)
}

// repair sends a repair request: accepted is nil; "accepted": false is a
// RefusedError; anything else (no answer, no "accepted") is an error.
func (p *Provider) repair(ctx context.Context, question string, node *v1.Node, requestID string, premise nscloud.Premise) error {
	if requestID == "" {
		return fmt.Errorf("webhook %s for node %s: no request ID", question, node.Name)
	}
	r, err := p.send(ctx, question, node, requestID, premise)
	if err != nil {
		return err
	}
	if r.Accepted == nil {
		return fmt.Errorf("webhook %s for node %s: malformed answer: no \"accepted\" field", question, node.Name)
	}
	if !*r.Accepted {
		return &nscloud.RefusedError{Step: question, Node: node.Name, Message: r.Message}
	}
	return nil
}
