package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/google/cadvisor/lib/model"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	kubeletevents "k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubemark"
	utilflag "k8s.io/kubernetes/pkg/util/flag"
)

// bootIDFlag names the flag this build adds to kubemark's.
const bootIDFlag = "boot-id"

// withBootID adds --boot-id to upstream's hollow-node command: empty (the
// default), upstream's own run does everything; set, runWithBootID runs
// the kubelet morph, reading every other flag from the same flag set, so
// that their names, defaults and parsing stay upstream's.
func withBootID(cmd *cobra.Command) {
	var bootID string
	cmd.Flags().StringVar(&bootID, bootIDFlag, "", "The boot ID the hollow kubelet reports in status.nodeInfo.bootID, a UUID as /proc/sys/kernel/random/boot_id holds (--morph=kubelet only; added by nodeshepherd: upstream's fake cAdvisor reports none). "+
		"A kubelet that starts with a boot ID other than its Node's records a Rebooted event, which is posted to the API server. Empty: upstream kubemark, no boot ID.")
	upstream := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if bootID == "" {
			return upstream(c, args)
		}
		verflag.PrintAndExitIfRequested()
		cliflag.PrintFlags(c.Flags())
		h, err := readHollowFlags(c.Flags(), bootID)
		if err != nil {
			return err
		}
		return runWithBootID(c.Context(), h)
	}
}

// hollowFlags are the kubemark flags the kubelet morph uses.
type hollowFlags struct {
	bootID                          string
	name                            string
	kubeconfig, bootstrapKubeconfig string
	certDir                         string
	contentType                     string
	qps                             float32
	burst                           int
	kubeletPort, readOnlyPort       int
	maxPods                         int
	useHostImageService             bool
	nodeLabels, extendedResources   map[string]string
	registerWithTaints              []v1.Taint
}

// readHollowFlags reads kubemark's parsed flags from its flag set. An
// error names the flag: a flag whose type is not the one read here means
// that kubemark changed, and this file must follow.
func readHollowFlags(fs *pflag.FlagSet, bootID string) (*hollowFlags, error) {
	var errs []error
	check := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", name, err))
		}
	}
	str := func(name string) string {
		v, err := fs.GetString(name)
		check(name, err)
		return v
	}
	num := func(name string) int {
		v, err := fs.GetInt(name)
		check(name, err)
		return v
	}
	labelMap := func(name string) map[string]string {
		f := fs.Lookup(name)
		if f == nil {
			check(name, errors.New("no such flag in this kubemark"))
			return nil
		}
		m, ok := f.Value.(*cliflag.ConfigurationMap)
		if !ok {
			check(name, fmt.Errorf("a flag of type %T, not the *ConfigurationMap this build reads", f.Value))
			return nil
		}
		return maps.Clone(map[string]string(*m))
	}
	h := &hollowFlags{
		bootID:              bootID,
		name:                str("name"),
		kubeconfig:          str("kubeconfig"),
		bootstrapKubeconfig: str("bootstrap-kubeconfig"),
		certDir:             str("cert-dir"),
		contentType:         str("kube-api-content-type"),
		burst:               num("kube-api-burst"),
		kubeletPort:         num("kubelet-port"),
		readOnlyPort:        num("kubelet-read-only-port"),
		maxPods:             num("max-pods"),
		nodeLabels:          labelMap("node-labels"),
		extendedResources:   labelMap("extended-resources"),
	}
	var err error
	h.qps, err = fs.GetFloat32("kube-api-qps")
	check("kube-api-qps", err)
	h.useHostImageService, err = fs.GetBool("use-host-image-service")
	check("use-host-image-service", err)
	if f := fs.Lookup("register-with-taints"); f == nil {
		check("register-with-taints", errors.New("no such flag in this kubemark"))
	} else if t, ok := f.Value.(utilflag.RegisterWithTaintsVar); !ok || t.Value == nil {
		check("register-with-taints", fmt.Errorf("a flag of type %T, not the RegisterWithTaintsVar this build reads", f.Value))
	} else {
		h.registerWithTaints = *t.Value
	}
	if morph := str("morph"); morph != "kubelet" {
		errs = append(errs, fmt.Errorf("--%s: only the kubelet reports a boot ID, and --morph is %q: give --morph=kubelet, or no --%s", bootIDFlag, morph, bootIDFlag))
	}
	if err := checkBootID(bootID); err != nil {
		errs = append(errs, err)
	}
	return h, errors.Join(errs...)
}

// checkBootID accepts a UUID in its canonical form, as the kernel writes
// /proc/sys/kernel/random/boot_id.
func checkBootID(id string) error {
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return fmt.Errorf("--%s %q: not a UUID of the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as /proc/sys/kernel/random/boot_id holds", bootIDFlag, id)
	}
	return nil
}

// runWithBootID runs a hollow kubelet as kubemark's kubelet morph does
// (kubemark.GetHollowKubeletConfig and NewHollowKubelet, the fake remote
// runtime and its image service, the stub container manager), but with a
// cAdvisor that reports h.bootID and with the Rebooted event posted.
func runWithBootID(ctx context.Context, h *hollowFlags) error {
	klog.InfoS("Hollow kubelet with a boot ID", "version", version.Get().GitVersion, "node", h.name, "bootID", h.bootID)
	if h.bootstrapKubeconfig != "" {
		if err := bootstrap.LoadClientCert(ctx, h.kubeconfig, h.bootstrapKubeconfig, h.certDir, types.NodeName(h.name)); err != nil {
			return fmt.Errorf("--bootstrap-kubeconfig %s: %w", h.bootstrapKubeconfig, err)
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", h.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", h.kubeconfig, err)
	}
	rc.ContentType, rc.QPS, rc.Burst, rc.UserAgent = h.contentType, h.qps, h.burst, "hollow-kubelet"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", h.kubeconfig, err)
	}
	flags, kc := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: h.name, KubeletPort: h.kubeletPort, KubeletReadOnlyPort: h.readOnlyPort,
		MaxPods: h.maxPods, NodeLabels: h.nodeLabels, RegisterWithTaints: h.registerWithTaints,
	})
	// The heartbeats (status posts and Lease renewals) are not rate
	// limited and give up after the shorter of the status update period
	// and the Lease duration, as kubemark sets them up.
	hb := rest.CopyConfig(rc)
	hb.Timeout = min(kc.NodeStatusUpdateFrequency.Duration, time.Duration(kc.NodeLeaseDurationSeconds)*time.Second)
	hb.QPS = -1
	heartbeat, err := kubernetes.NewForConfig(hb)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", h.kubeconfig, err)
	}
	extended := v1.ResourceList{}
	for name, v := range h.extendedResources {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("--extended-resources %s=%s: %w", name, v, err)
		}
		extended[v1.ResourceName(name)] = q
	}

	endpoint, err := fakeremote.GenerateEndpoint()
	if err != nil {
		return fmt.Errorf("the fake runtime's endpoint: %w", err)
	}
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("starting the fake runtime at %s: %w", endpoint, err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("the fake runtime's service at %s: %w", endpoint, err)
	}
	var images internalapi.ImageManagerService = fakeRuntime.ImageService
	if h.useHostImageService {
		images, err = remote.NewRemoteImageServiceBuilder().WithEndpoint(kc.ImageServiceEndpoint).WithConnectionTimeout(15 * time.Second).Build(ctx)
		if err != nil {
			return fmt.Errorf("--use-host-image-service: the image service at %s: %w", kc.ImageServiceEndpoint, err)
		}
	}

	hk := kubemark.NewHollowKubelet(flags, kc, client, heartbeat,
		&bootCAdvisor{Fake: &cadvisortest.Fake{NodeName: h.name}, bootID: h.bootID},
		images, runtimeService, cm.NewStubContainerManagerWithDevicePluginResource(extended))
	hk.KubeletDeps.Recorder = postReboots(ctx, client, h.name)
	hk.Run(ctx) // blocks
	return nil
}

// bootCAdvisor is kubemark's fake cAdvisor with a boot ID in its machine
// information, where the kubelet reads it for status.nodeInfo.bootID.
type bootCAdvisor struct {
	*cadvisortest.Fake
	bootID string
}

func (b *bootCAdvisor) MachineInfo(logger klog.Logger) (*model.MachineInfo, error) {
	info, err := b.Fake.MachineInfo(logger)
	if err != nil {
		return nil, err
	}
	info.BootID = b.bootID
	return info, nil
}

// postReboots is the kubelet's event recorder: a FakeRecorder, as kubemark
// gives it (the kubelet starts no OOM watcher on this host's /dev/kmsg
// with one), whose events are read as they come; the Rebooted event, which
// the kubelet records when it finds its Node with another boot ID, is
// posted to the API server on the Node as the kubelet's own recorder would
// post it. Every other event is dropped, as kubemark drops them all.
//
// The kubelet writes into the recorder's channel and waits while it is
// full, so the reader never blocks: it hands a Rebooted message to the
// poster, or drops it if the poster is still busy (a kubelet records one
// per start), and the poster asks the API server with a deadline.
func postReboots(ctx context.Context, client kubernetes.Interface, node string) *record.FakeRecorder {
	fake := &record.FakeRecorder{Events: make(chan string, 100)}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: node})
	reboots := make(chan string, 4)
	go func() {
		for line := range fake.Events {
			if msg, ok := rebootMessage(line); ok {
				select {
				case reboots <- msg:
				default:
					klog.InfoS("Dropping the kubelet's event: the last ones are still being posted", "reason", kubeletevents.NodeRebooted, "message", msg)
				}
			}
		}
	}()
	go func() {
		for msg := range reboots {
			// The kubelet names its Node with the Node's UID once it knows it.
			ref := &v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
			getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if n, err := client.CoreV1().Nodes().Get(getCtx, node, metav1.GetOptions{}); err == nil {
				ref.UID = n.UID
			}
			cancel()
			klog.InfoS("Posting the kubelet's event", "reason", kubeletevents.NodeRebooted, "message", msg)
			rec.Event(ref, v1.EventTypeWarning, kubeletevents.NodeRebooted, msg)
		}
	}()
	return fake
}

// rebootMessage is the message of a Rebooted event as a FakeRecorder
// without objects writes it ("Warning Rebooted MESSAGE"); the kubelet
// gives that reason to no other event.
func rebootMessage(line string) (string, bool) {
	return strings.CutPrefix(line, v1.EventTypeWarning+" "+kubeletevents.NodeRebooted+" ")
}
