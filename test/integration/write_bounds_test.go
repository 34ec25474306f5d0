package integration

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Every API write has a bound (kube.WriteTimeout), and a write whose answer
// is lost is sent again or re-checked, never assumed either way.

// TestNodeIPAMWriteWithLostAnswer: the podCIDRs patches of more nodes than
// nodeipam has workers reach the API server and their answers never come
// back. Without a bound every worker waits forever and the other nodes get
// no CIDR; with one, the unanswered CIDRs stay reserved for their node (the
// write may have landed: handing them to another node would give one block
// to two), the same write is sent again, and every node ends with its own
// CIDRs and each block is counted once.
func TestNodeIPAMWriteWithLostAnswer(t *testing.T) {
	const nodes, hangs = 8, 5 // more hangs than nodeipam's 4 workers
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	// Before the controller starts: its first writes are the ones to lose.
	proxy.Inject(framework.FaultRule{Name: "hang-patch", Kind: framework.FaultHang, Methods: []string{http.MethodPatch},
		Resource: "nodes", Subresource: "-", Times: hangs})
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), ipamConfig("10.244.0.0/16", 24), onlyIPAM)
	framework.StartFakeNodes(t, fakenode.Config{Client: client, Nodes: nodes})
	cidrs := podCIDRs(t, client, nodes)
	assertDistinct(t, cidrs)
	if got := proxy.Injected("hang-patch"); got != hangs {
		t.Errorf("%d patches lost their answer, want %d (%s)", got, hangs, proxy)
	}
	// Each node's block counted once: none freed while its node holds it,
	// none leaked by a retry.
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("%d CIDRs in use", nodes), func(context.Context) (bool, string, error) {
		used := ns.Metric(t, "nodeshepherd_nodeipam_cidrs_in_use", map[string]string{"cluster_cidr": "10.244.0.0/16"})
		return used == nodes, fmt.Sprintf("%v in use", used), nil
	})
}
