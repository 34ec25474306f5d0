package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/simulate"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// imagesOf writes a node's status.images as NAME|NAME=BYTES,... in order.
func imagesOf(n *v1.Node) string {
	parts := make([]string, 0, len(n.Status.Images))
	for _, im := range n.Status.Images {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.Join(im.Names, "|"), im.SizeBytes))
	}
	return strings.Join(parts, ",")
}

func mustImages(t *testing.T, s string) []v1.ContainerImage {
	t.Helper()
	im, err := fakenode.ParseImages(s)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// waitNodeImages waits until every node named in want reports exactly its
// images, in order, on the API server.
func waitNodeImages(t *testing.T, c kubernetes.Interface, want map[string]string) {
	t.Helper()
	framework.Eventually(t, time.Minute, "the nodes' status.images", func(ctx context.Context) (bool, string, error) {
		for name, w := range want {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, name + ": " + err.Error(), nil
			}
			if got := imagesOf(n); got != w {
				return false, fmt.Sprintf("%s reports %q, want %q", name, got, w), nil
			}
		}
		return true, "", nil
	})
}

const nginxDigest = "docker.io/library/nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestFakeNodeImagesReported: fake nodes report their images in
// status.images, as a kubelet does: every node's and their group's, the
// largest first, at most nodeStatusMaxImages; heartbeats and a kubelet
// restart keep them. `nodeshepherd fakenodes --images` does the same from
// its flag, and refuses a bad one with exit code 2.
func TestFakeNodeImagesReported(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	nginx := v1.ContainerImage{Names: []string{nginxDigest, "docker.io/library/nginx:1.27"}, SizeBytes: 70_000_000}
	m := framework.StartFakeNodes(t, fakenode.Config{Client: client, NamePrefix: "img-",
		Images: mustImages(t, "registry.k8s.io/pause:3.10=750kB,busybox:1.37=4MB"), NodeStatusMaxImages: 2,
		LeaseRenewInterval: 500 * time.Millisecond, LeaseDuration: 4 * time.Second,
		NodeStatusUpdateFrequency: 500 * time.Millisecond, NodeStatusReportFrequency: time.Second,
		Groups: []fakenode.NodeGroup{
			{Name: "web", Zone: "zone-a", Count: 2, Images: []v1.ContainerImage{nginx}},
			{Name: "plain", Zone: "zone-b", Count: 1},
		}})
	names := m.NodeNames()
	nginxWant := nginxDigest + "|docker.io/library/nginx:1.27=70000000"
	want := map[string]string{
		names[0]: nginxWant + ",busybox:1.37=4000000", // the two largest of three
		names[1]: nginxWant + ",busybox:1.37=4000000",
		names[2]: "busybox:1.37=4000000,registry.k8s.io/pause:3.10=750000",
	}
	waitNodeImages(t, client, want)

	// Heartbeats patch the conditions only: after several status reports
	// (every second) the images are still there.
	before := m.Stats().NodeStatusPosts
	framework.Eventually(t, 30*time.Second, "node status reports", func(context.Context) (bool, string, error) {
		n := m.Stats().NodeStatusPosts
		return n >= before+6, fmt.Sprintf("%d status posts since", n-before), nil
	})
	waitNodeImages(t, client, want)

	// A kubelet restart posts the full status again, images included, also
	// after someone cleared them.
	if _, err := client.CoreV1().Nodes().PatchStatus(ctx, names[2], []byte(`{"status":{"images":null}}`)); err != nil {
		t.Fatal(err)
	}
	for _, a := range []fakenode.Action{fakenode.KubeletStop, fakenode.KubeletStart} {
		if _, err := m.Apply(ctx, fakenode.Fault{Action: a, Target: fakenode.Target{Nodes: []string{names[2]}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitNodeImages(t, client, want)

	t.Run("fakenodes --images", func(t *testing.T) {
		ctx := framework.Context(t)
		exited := startFakeNodesCommand(t, cp.KubeconfigPath(), "--nodes=2", "--zones=zone-c", "--name-prefix=cli-", "--csi-driver=",
			"--images=registry.k8s.io/pause:3.10=750kB, docker.io/library/nginx:1.27=70MB,postgres:17=1.5GiB", "--node-status-max-images=-1")
		all := "postgres:17=1610612736,docker.io/library/nginx:1.27=70000000,registry.k8s.io/pause:3.10=750000"
		framework.Eventually(t, time.Minute, "the nodes of fakenodes --images report them", func(ctx context.Context) (bool, string, error) {
			if err := exited(); err != nil {
				return false, "", err
			}
			for _, name := range []string{"cli-0000", "cli-0001"} {
				n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, name + ": " + err.Error(), nil
				}
				if got := imagesOf(n); got != all {
					return false, fmt.Sprintf("%s reports %q", name, got), nil
				}
			}
			return true, "", nil
		})

		for _, c := range []struct{ flag, want string }{
			{"--images=nginx", `--images: images "nginx": "nginx" is not NAME=SIZE`},
			{"--images=nginx:1.27=70XB", `image nginx:1.27: size "70XB": unknown unit "XB"`},
			{"--images=Nginx=1MB", `image name "Nginx" is not an image reference`},
			{"--node-status-max-images=0", "--node-status-max-images must be -1 (every image) or at least 1, got 0"},
		} {
			b, err := framework.CommandContext(ctx, framework.Binary(t), "fakenodes", "--kubeconfig", cp.KubeconfigPath(), c.flag).CombinedOutput()
			if exitCode(err) != 2 || !strings.Contains(string(b), c.want) {
				t.Errorf("fakenodes %s: exit %d, want 2 and %q:\n%s", c.flag, exitCode(err), c.want, b)
			}
		}
	})
}

// TestFakeNodeImagesSnapshot: `nodeshepherd scenario snapshot` of a
// cluster whose nodes report images writes the image table, the images
// every group has as node.images and the rest per group (those at least
// half of a group's nodes report), and the scenario loads with them.
func TestFakeNodeImagesSnapshot(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	pause := mustImages(t, "registry.k8s.io/pause:3.10=750kB")
	nginx := v1.ContainerImage{Names: []string{nginxDigest, "docker.io/library/nginx:1.27"}, SizeBytes: 70_000_000}
	m := framework.StartFakeNodes(t, fakenode.Config{Client: client, Images: pause, Groups: []fakenode.NodeGroup{
		{Name: "web-a", Zone: "zone-a", Count: 2, Labels: map[string]string{"pool": "web"}, Images: []v1.ContainerImage{nginx}},
		{Name: "db-a", Zone: "zone-a", Count: 1, Labels: map[string]string{"pool": "db"}, Images: mustImages(t, "postgres:17=400MB")},
	}})
	names := m.NodeNames()
	waitNodeImages(t, client, map[string]string{names[0]: nginxWant(), names[2]: "postgres:17=400000000,registry.k8s.io/pause:3.10=750000"})
	// Each node's first status post is its full one; the next comes no
	// sooner than the kubelet's 10 s, and is a heartbeat.
	framework.Eventually(t, 30*time.Second, "every node's full status", func(context.Context) (bool, string, error) {
		n := m.Stats().NodeStatusPosts
		return n >= 3, fmt.Sprintf("%d status posts", n), nil
	})
	// One web node pulled an image the other has not: half of the group's
	// nodes, enough to be the group's.
	pulled := []v1.ContainerImage{nginx, pause[0], {Names: []string{"busybox:1.37"}, SizeBytes: 4_000_000}}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"images": pulled}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().PatchStatus(ctx, names[1], patch); err != nil {
		t.Fatal(err)
	}

	bin := framework.Binary(t)
	out := filepath.Join(t.TempDir(), "imgs")
	b, err := framework.CommandContext(ctx, bin, "scenario", "snapshot", "--kubeconfig", cp.KubeconfigPath(), "-o", out).CombinedOutput()
	t.Logf("snapshot:\n%s", b)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if !strings.Contains(string(b), "Images: 4 of the 4 the nodes report (those at least half of a group's nodes report), 1 of them in every group (cluster.node.images)") {
		t.Errorf("summary lacks the images line")
	}
	scenarioFile := filepath.Join(out, "scenario.yaml")
	text, err := os.ReadFile(scenarioFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"  - {name: postgres:17, size: 400000000}  # 400MB\n",
		"  - {names: [" + nginxDigest + ", docker.io/library/nginx:1.27], size: 70000000}  # 70MB\n",
		"  - {name: busybox:1.37, size: 4000000}  # 4MB\n",
		"  - {name: registry.k8s.io/pause:3.10, size: 750000}  # 750kB\n",
		"  node:\n    images:\n    - registry.k8s.io/pause:3.10\n",
	} {
		if !strings.Contains(string(text), line) {
			t.Errorf("scenario lacks %q:\n%s", line, text)
		}
	}
	sc, err := simulate.Load(scenarioFile)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string][]string{}
	for _, g := range sc.Cluster.NodeGroups {
		groups[g.Labels["pool"]] = g.Images
	}
	if !slices.Equal(groups["web"], []string{"docker.io/library/nginx:1.27", "busybox:1.37"}) || !slices.Equal(groups["db"], []string{"postgres:17"}) {
		t.Errorf("groups' images %v", groups)
	}
	if len(sc.Cluster.Images) != 4 || !slices.Equal(sc.Cluster.Node.Images, []string{"registry.k8s.io/pause:3.10"}) {
		t.Errorf("table %+v, node images %v", sc.Cluster.Images, sc.Cluster.Node.Images)
	}
}

func nginxWant() string {
	return nginxDigest + "|docker.io/library/nginx:1.27=70000000,registry.k8s.io/pause:3.10=750000"
}

// startFakeNodesCommand runs `nodeshepherd fakenodes` with args (after
// --kubeconfig and a control socket of its own) until the test ends, its
// log shown if the test fails. exited says whether the process ended: a
// wait on it reports that instead of timing out.
func startFakeNodesCommand(t *testing.T, kubeconfig string, args ...string) (exited func() error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil { // fakenodes refuses a control socket others can reach
		t.Fatal(err)
	}
	cmd := framework.CommandContext(framework.Context(t), framework.Binary(t),
		append([]string{"fakenodes", "--kubeconfig", kubeconfig, "--control-socket", filepath.Join(dir, "ctl.sock")}, args...)...)
	log, err := os.Create(filepath.Join(dir, "fakenodes.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("fakenodes:\n%s", b)
		}
	})
	return func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("fakenodes exited: %v", err)
		default:
			return nil
		}
	}
}
