// Package controllers is the registry of nodeshepherd's controllers: the one
// list of their descriptors (start order is list order), and the settings of
// them all. `run`, `simulate`, `config default` and the RBAC tests read it;
// each controller describes itself in its own package (descriptor.go).
package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/cloudnodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/readinessrestore"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/tainteviction"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner/janitor"
)

// Config holds the shared settings and every controller's own, one field
// per controller, typed so that callers (simulate, tests) can set them.
type Config struct {
	Shared descriptor.Shared
	// Companion: which controllers run although another writer writes what
	// they own (--allow-conflicting-writers).
	Companion          companion.Settings
	NodeLifecycle      nodelifecycle.Config
	TaintEviction      tainteviction.Config
	NodeIPAM           nodeipam.Config
	CloudNodeLifecycle cloudnodelifecycle.Settings
	Drain              drain.Config
	Scheduler          scheduler.Config
	OutOfService       outofservice.Config
	ReadinessRestore   readinessrestore.Config
	Remediation        remediation.Config
}

// registry lists every controller once, in start order: its descriptor and
// where its settings live in Config.
var registry = []entry{
	bind(nodelifecycle.Descriptor, func(c *Config) *nodelifecycle.Config { return &c.NodeLifecycle }),
	bind(tainteviction.Descriptor, func(c *Config) *tainteviction.Config { return &c.TaintEviction }),
	bind(nodeipam.Descriptor, func(c *Config) *nodeipam.Config { return &c.NodeIPAM }),
	bind(cloudnodelifecycle.Descriptor, func(c *Config) *cloudnodelifecycle.Settings { return &c.CloudNodeLifecycle }),
	bind(drain.Descriptor, func(c *Config) *drain.Config { return &c.Drain }),
	bind(scheduler.Descriptor, func(c *Config) *scheduler.Config { return &c.Scheduler }),
	// outofservice asks cloudnodelifecycle's provider: one --cloud-provider.
	bind(outofservice.Descriptor, func(c *Config) *outofservice.Config {
		c.OutOfService.Cloud = c.CloudNodeLifecycle.Cloud
		return &c.OutOfService
	}),
	bind(readinessrestore.Descriptor, func(c *Config) *readinessrestore.Config { return &c.ReadinessRestore }),
	// remediation asks cloudnodelifecycle's provider to reboot, replace and
	// power off, and it and outofservice's fencing endpoint whether a
	// machine is off: one endpoint, one set of flags.
	bind(remediation.Descriptor, func(c *Config) *remediation.Config {
		c.Remediation.Cloud = c.CloudNodeLifecycle.Cloud
		c.Remediation.Fencing = c.OutOfService.Fencing
		return &c.Remediation
	}),
}

// Names lists the controllers in start order.
var Names = func() []string {
	var out []string
	for _, e := range registry {
		out = append(out, e.info().Name)
	}
	return out
}()

// Registry describes every controller, in start order.
func Registry() []descriptor.Info {
	var out []descriptor.Info
	for _, e := range registry {
		out = append(out, e.info())
	}
	return out
}

// Default returns the shared settings' and every controller's defaults.
func Default() Config {
	c := Config{Shared: descriptor.DefaultShared()}
	for _, e := range registry {
		e.setDefault(&c)
	}
	return c
}

// Sections are the configuration file's sections of the controllers, bound
// to c: the shared settings first, then each controller's, in start order,
// then companion mode's.
func (c *Config) Sections() []config.Section {
	out := []config.Section{{Name: descriptor.SharedSection,
		Help: "Settings more than one controller reads (kube-controller-manager's and Draino's flag names).", Register: c.Shared.AddFlags}}
	for _, e := range registry {
		out = append(out, e.sections(c)...)
	}
	return append(out, config.Section{Name: companion.SectionName,
		Help:     "Running next to a managed cluster's own kube-controller-manager (docs/companion.md).",
		Register: c.Companion.AddFlags})
}

// AddFlags registers every controller's settings under kube-controller-manager's
// (or Draino's, or kube-scheduler's) flag names.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	for _, s := range c.Sections() {
		s.Register(fs)
	}
}

// Validate checks the shared settings and those of the selected controllers.
func (c *Config) Validate(selected []string) error {
	errs := []error{c.Shared.Validate(), c.Companion.Validate(Names)}
	needed := map[string]bool{}
	for _, e := range registry {
		if slices.Contains(selected, e.info().Name) {
			for _, n := range e.info().Needs {
				needed[n] = true
			}
		}
	}
	for _, e := range registry {
		if slices.Contains(selected, e.info().Name) {
			if err := e.idle(c); err != nil && !needed[e.info().Name] {
				errs = append(errs, err)
			}
			errs = append(errs, e.validate(c))
			for _, need := range e.info().Needs {
				if !slices.Contains(selected, need) {
					errs = append(errs, fmt.Errorf("--controllers: %s needs %s, which carries out part of its work; select %s too, or leave %s out",
						e.info().Name, need, need, e.info().Name))
				}
			}
		}
	}
	return joinUnique(errs)
}

// joinUnique joins errors, each message once: a shared setting is checked by
// every controller that reads it.
func joinUnique(errs []error) error {
	var out []error
	seen := map[string]bool{}
	for _, err := range errs {
		if err == nil {
			continue
		}
		for _, msg := range strings.Split(err.Error(), "\n") {
			if !seen[msg] {
				seen[msg] = true
				out = append(out, errors.New(msg))
			}
		}
	}
	return errors.Join(out...)
}

// Select drops controllers that "*" selected but that are off by
// configuration, as kube-controller-manager does: nodeipam runs only with
// --allocate-node-cidrs. explicit are the names given one by one.
//
// A controller that a selected one Needs stays, off by configuration or
// not: remediation's Drain steps are the drain controller's work even when
// no drain rule is configured.
func (c *Config) Select(resolved, explicit []string) []string {
	out := slices.Clone(resolved)
	for _, e := range registry {
		name := e.info().Name
		if !e.enabled(c) && !slices.Contains(explicit, name) {
			out = slices.DeleteFunc(out, func(n string) bool { return n == name })
		}
	}
	needed := map[string]bool{}
	for _, e := range registry {
		if slices.Contains(out, e.info().Name) {
			for _, n := range e.info().Needs {
				needed[n] = true
			}
		}
	}
	var kept []string
	for _, name := range resolved {
		if slices.Contains(out, name) || needed[name] {
			kept = append(kept, name)
		}
	}
	return kept
}

// Constructors builds every controller from a copy of cfg; dry run comes
// from the manager. A controller with conflicts (a controller that is not a
// companion, or one whose settings make it share something, such as the
// scheduler under another scheduler's name) is guarded: it is refused, or
// stopped, while another writer writes what it owns.
func Constructors(cfg Config) map[string]manager.Constructor {
	out := map[string]manager.Constructor{}
	for _, e := range registry {
		info := e.info()
		build := func(ctx manager.Context) (manager.Controller, error) {
			c, err := e.build(&cfg, ctx)
			if err != nil || JanitorCarrier(ctx.Controllers) != info.Name {
				return c, err
			}
			return withJanitor(c, ctx)
		}
		out[info.Name] = companion.Guard(companion.Guarded{Name: info.Name, Replaces: info.Replaces, Claims: Conflicts(&cfg, info.Name),
			Allowed: cfg.Companion.Allowed(info.Name)}, build)
	}
	return out
}

// janitorCarriers are the controllers that may run the janitor
// (pkg/owner/janitor), which lifts the expired owner records of the
// controllers a process does not run: those that write Nodes and whose
// roles grant get and patch on them (TestJanitorCarriersMayPatchNodes), so
// that the drain's and the remediation's leftovers are lifted wherever
// nodeshepherd still runs one of them.
var janitorCarriers = []string{nodelifecycle.Name, drain.Name, remediation.Name}

// JanitorCarrier is the controller of the process that runs the janitor:
// the first carrier among those it runs, in start order ("" for none).
func JanitorCarrier(running []string) string {
	for _, name := range Names {
		if slices.Contains(running, name) && slices.Contains(janitorCarriers, name) {
			return name
		}
	}
	return ""
}

// withJanitor runs the janitor alongside c, as one controller for the
// manager: either stopping before ctx ends stops both, and the health
// check asks both.
func withJanitor(c manager.Controller, ctx manager.Context) (manager.Controller, error) {
	j, err := janitor.New(janitor.Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(), Recorder: ctx.Recorder(janitor.EventSource),
		Registry: ctx.Registry, Clock: ctx.Clock, DryRun: ctx.DryRun, ProgressTimeout: ctx.ProgressTimeout, Live: ctx.Controllers})
	if err != nil {
		return nil, fmt.Errorf("the owner-record janitor: %w", err)
	}
	return carrying{Controller: c, janitor: j}, nil
}

// carrying is a controller with the janitor running alongside.
type carrying struct {
	manager.Controller
	janitor *janitor.Janitor
}

func (c carrying) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jerr := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil { // named, as the manager names a controller's panic
				err = fmt.Errorf("%s panicked: %v", janitor.Name, r)
			}
			if err == nil && ctx.Err() == nil {
				err = fmt.Errorf("%s stopped on its own", janitor.Name)
			}
			jerr <- err
			cancel() // a janitor that stopped early stops its carrier, and the manager fails
		}()
		err = c.janitor.Run(ctx)
	}()
	err := c.Controller.Run(ctx)
	cancel()
	return errors.Join(err, <-jerr)
}

func (c carrying) Healthy(now time.Time) error {
	var errs []error
	if h, ok := c.Controller.(manager.HealthChecker); ok {
		errs = append(errs, h.Healthy(now))
	}
	if err := c.janitor.Healthy(now); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", janitor.Name, err))
	}
	return errors.Join(errs...)
}

// Conflicts returns what the named controller shares with another writer
// under the settings c: its descriptor's Conflicts and those of its
// settings (Descriptor.ConflictsFor).
func Conflicts(c *Config, name string) []companion.Claim {
	for _, e := range registry {
		if e.info().Name == name {
			return append(slices.Clone(e.info().Conflicts), e.conflicts(c)...)
		}
	}
	return nil
}

// Companions lists the controllers that can run next to a managed control
// plane's own, in start order.
func Companions() []string {
	var out []string
	for _, e := range registry {
		if e.info().Companion {
			out = append(out, e.info().Name)
		}
	}
	return out
}

// Replaced lists, in start order, the kube-controller-manager controllers
// that nodeshepherd's replace.
func Replaced() []string {
	var out []string
	for _, e := range registry {
		if r := e.info().Replaces; r != "" {
			out = append(out, r)
		}
	}
	return out
}

// KubeControllerManagerFlag is the --controllers value that turns off, in
// kube-controller-manager, the controllers nodeshepherd replaces.
func KubeControllerManagerFlag() string {
	out := "*"
	for _, r := range Replaced() {
		out += ",-" + r
	}
	return out
}

// entry is a descriptor bound to its field of Config, with its settings'
// type hidden so that the registry is one list.
type entry interface {
	info() descriptor.Info
	ownTests() descriptor.Tests
	setDefault(c *Config)
	sections(c *Config) []config.Section
	enabled(c *Config) bool
	idle(c *Config) error
	validate(c *Config) error
	build(c *Config, ctx manager.Context) (manager.Controller, error)
	conflicts(c *Config) []companion.Claim
}

type bound[C any] struct {
	d     descriptor.Descriptor[C]
	field func(*Config) *C
}

func bind[C any](d descriptor.Descriptor[C], field func(*Config) *C) entry {
	return bound[C]{d: d, field: field}
}

// info is the descriptor's Info, with the Tests the registry gives for it
// (registeredTests) when its descriptor.go predates the field.
func (b bound[C]) info() descriptor.Info {
	i := b.d.Info
	if t, ok := registeredTests[i.Name]; ok {
		i.Tests = t
	}
	return i
}

func (b bound[C]) ownTests() descriptor.Tests { return b.d.Tests }
func (b bound[C]) setDefault(c *Config)       { *b.field(c) = b.d.Default() }

func (b bound[C]) sections(c *Config) []config.Section {
	var out []config.Section
	for _, s := range b.d.Sections {
		out = append(out, config.Section{Name: s.Name, Help: s.Help, Register: func(fs *pflag.FlagSet) { s.AddFlags(b.field(c), fs) }})
	}
	return out
}

func (b bound[C]) enabled(c *Config) bool { return b.d.Enabled == nil || b.d.Enabled(b.field(c)) }

func (b bound[C]) idle(c *Config) error {
	if b.d.Idle == nil {
		return nil
	}
	return b.d.Idle(b.field(c))
}

func (b bound[C]) validate(c *Config) error {
	own, err := b.d.Complete(b.field(c), &c.Shared)
	if err != nil || b.d.Validate == nil {
		return err
	}
	return b.d.Validate(&own)
}

func (b bound[C]) build(c *Config, ctx manager.Context) (manager.Controller, error) {
	own, err := b.d.Complete(b.field(c), &c.Shared)
	if err != nil {
		return nil, err
	}
	return b.d.New(&own, ctx)
}

func (b bound[C]) conflicts(c *Config) []companion.Claim {
	if b.d.ConflictsFor == nil {
		return nil
	}
	own, err := b.d.Complete(b.field(c), &c.Shared)
	if err != nil {
		return nil // Validate reports it, and build fails with it
	}
	return b.d.ConflictsFor(&own)
}
