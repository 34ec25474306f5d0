package simulate

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

const imagesCluster = `cluster:
  images:
  - {name: registry.k8s.io/pause:3.10, size: 750kB}
  - {names: [docker.io/library/nginx:1.27, docker.io/library/nginx@sha256:` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `], size: 70MB}
  - {name: postgres:17, size: 1.5GiB}
  node: {cpu: "4", memory: 8Gi, images: [registry.k8s.io/pause:3.10]}
  kubelet: {nodeStatusMaxImages: 2}
  nodeGroups:
  - {name: a-web, zone: zone-a, nodes: 2, images: [docker.io/library/nginx:1.27]}
  - {name: b-db, zone: zone-b, nodes: 1, images: [postgres:17, registry.k8s.io/pause:3.10]}
`

func imagesScenario(t *testing.T) string {
	t.Helper()
	old := "cluster:\n  zones:\n  - {name: zone-a, nodes: 2}\n  - {name: zone-b, nodes: 1}\n  node: {cpu: \"4\", memory: 8Gi}\n"
	if !strings.Contains(validScenario, old) {
		t.Fatal("test bug: cluster block not found")
	}
	return strings.Replace(validScenario, old, imagesCluster, 1)
}

// cluster.images is the table; node.images and a group's images name its
// images, which the fake nodes then report.
func TestImagesScenario(t *testing.T) {
	text := imagesScenario(t)
	sc, err := Load(writeScenario(t, text))
	if err != nil {
		t.Fatal(err)
	}
	f := sc.fakeNodeConfig(1)
	if got := fakenode.FormatImages(f.Images); got != "registry.k8s.io/pause:3.10=750000" {
		t.Errorf("every node's images %s", got)
	}
	if got := fakenode.FormatImages(f.Groups[0].Images); got != "docker.io/library/nginx:1.27=70000000" || len(f.Groups[0].Images[0].Names) != 2 {
		t.Errorf("group a-web's images %s (%v)", got, f.Groups[0].Images)
	}
	if got := fakenode.FormatImages(f.Groups[1].Images); got != "postgres:17=1610612736,registry.k8s.io/pause:3.10=750000" {
		t.Errorf("group b-db's images %s", got)
	}
	if f.NodeStatusMaxImages != 2 {
		t.Errorf("nodeStatusMaxImages %d", f.NodeStatusMaxImages)
	}
	if _, err := Load(writeScenario(t, strings.Replace(text, "  kubelet: {nodeStatusMaxImages: 2}\n", "", 1))); err != nil {
		t.Errorf("without nodeStatusMaxImages: %v", err)
	}

	bad := func(old, new string) string {
		if !strings.Contains(text, old) {
			t.Fatalf("test bug: %q not in the scenario", old)
		}
		return strings.Replace(text, old, new, 1)
	}
	for _, c := range []struct{ name, text, want string }{
		{"bad size", bad("size: 750kB", "size: 750 kilobytes"), `:12: image size "750 kilobytes": unknown unit "kilobytes"`},
		{"size not a scalar", bad("size: 750kB", "size: [1]"), ":12: image size: write a number of bytes"},
		{"no size", bad(", size: 750kB}", "}"), ":12: cluster.images[0]: size is missing"},
		{"no name", bad("name: registry.k8s.io/pause:3.10, size", "size"), ":12: cluster.images[0]: name is missing"},
		{"name and names", bad("name: postgres:17,", "name: postgres:17, names: [pg:17],"), ":14: cluster.images[2]: give name or names, not both"},
		{"bad name", bad("name: postgres:17,", "name: Postgres 17,"), `:14: cluster.images[2]: image name "Postgres 17" is not an image reference`},
		{"name twice", bad("name: postgres:17,", "name: registry.k8s.io/pause:3.10,"), `:14: cluster.images[2]: image name "registry.k8s.io/pause:3.10" is in cluster.images[0] already`},
		{"six names", bad("name: postgres:17,", "names: [a, b, c, d, e, f],"), ":14: cluster.images[2]: 6 names; a kubelet reports at most 5"},
		{"unknown image", bad("images: [docker.io/library/nginx:1.27]", "images: [nginx:1.27]"), `:18: cluster.nodeGroups[0].images[0]: image "nginx:1.27" is not in cluster.images; add it there with its size`},
		{"image listed twice", bad("images: [postgres:17, registry", "images: [postgres:17, postgres:17, registry"), `:19: cluster.nodeGroups[1].images[1]: image "postgres:17" is listed twice`},
		{"same image by two names", bad("images: [docker.io/library/nginx:1.27]", "images: [docker.io/library/nginx:1.27, docker.io/library/nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef]"), `is listed already, by its name "docker.io/library/nginx:1.27"`},
		{"unused image", bad("images: [postgres:17, registry.k8s.io/pause:3.10]", "images: [registry.k8s.io/pause:3.10]"), ":14: cluster.images[2] (postgres:17): no node reports it"},
		{"bad max images", bad("nodeStatusMaxImages: 2", "nodeStatusMaxImages: -2"), ":16: cluster.kubelet.nodeStatusMaxImages -2"},
		{"unknown field", bad("size: 1.5GiB}", "size: 1.5GiB, tag: x}"), ":14: field tag not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeScenario(t, c.text)
			_, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v\nwant %q and the file", err, c.want)
			}
		})
	}
	// Without a table, an image named is an error saying where to add it.
	noTable := strings.Replace(validScenario, "node: {cpu: \"4\", memory: 8Gi}", "node: {cpu: \"4\", memory: 8Gi, images: [pause:3.10]}", 1)
	if _, err := Load(writeScenario(t, noTable)); err == nil || !strings.Contains(err.Error(), `cluster.node.images[0]: image "pause:3.10": the cluster has no images table`) {
		t.Errorf("image without a table: %v", err)
	}
}

func withImages(n *v1.Node, spec string) *v1.Node {
	n.Status.Images = nil
	for _, part := range strings.Split(spec, ",") {
		names, size, _ := strings.Cut(part, "=")
		sz, err := fakenode.ParseImageSize(size)
		if err != nil {
			panic(err)
		}
		n.Status.Images = append(n.Status.Images, v1.ContainerImage{Names: strings.Split(names, "|"), SizeBytes: sz})
	}
	return n
}

// A snapshot's groups get the images at least half of their nodes report;
// those every group has become node.images; the table lists each once,
// largest first, and the scenario written loads with them.
func TestSnapshotImages(t *testing.T) {
	digest := "docker.io/library/nginx@sha256:" + strings.Repeat("ab", 32)
	var objs []runtime.Object
	for _, o := range snapshotCluster() {
		if n, ok := o.(*v1.Node); ok {
			spec := "registry.k8s.io/pause:3.10=750kB"
			switch {
			case n.Labels["pool"] == "db":
				spec += ",postgres:17=400MB"
			case n.Name == "a1" || n.Name == "a2":
				spec += "," + digest + "|docker.io/library/nginx:1.27=70MB"
			case n.Name == "b1":
				spec += ",docker.io/library/nginx:1.27=70MB,busybox:1=4MB,<none>@<none>=1MB"
			}
			o = withImages(n, spec)
		}
		objs = append(objs, o)
	}
	s, err := TakeSnapshot(context.Background(), fake.NewClientset(objs...), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.NodeImages, ","); got != "registry.k8s.io/pause:3.10" {
		t.Errorf("node images %s", got)
	}
	want := map[string]string{"zone-a-m5-large": "postgres:17", "zone-a-m5-large-2": "docker.io/library/nginx:1.27", // 2 of 3
		"zone-b-m5-large": "postgres:17", "zone-b-m5-large-2": "docker.io/library/nginx:1.27"} // 1 of 2; busybox too
	for _, g := range s.Groups {
		got := strings.Join(g.Images, ",")
		if g.Name == "zone-b-m5-large-2" {
			if got != "docker.io/library/nginx:1.27,busybox:1" {
				t.Errorf("group %s images %s", g.Name, got)
			}
			continue
		}
		if got != want[g.Name] {
			t.Errorf("group %s images %s, want %s", g.Name, got, want[g.Name])
		}
	}
	if len(s.Images) != 4 || s.Images[0].Name != "postgres:17" || s.Images[1].Names[1] != "docker.io/library/nginx:1.27" ||
		s.Images[1].Size.Bytes != 70_000_000 || s.Images[3].Name != "registry.k8s.io/pause:3.10" || s.ImagesSeen != 4 {
		t.Errorf("table %+v (%d seen)", s.Images, s.ImagesSeen)
	}
	dir := t.TempDir() + "/out"
	if _, err := PrepareOutput(dir, false); err != nil {
		t.Fatal(err)
	}
	path, _, err := s.Write(dir, "imgs", "test", false)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(path)
	for _, line := range []string{"  - {name: postgres:17, size: 400000000}  # 400MB\n",
		"  - {names: [" + digest + ", docker.io/library/nginx:1.27], size: 70000000}  # 70MB\n",
		"  node:\n    images:\n    - registry.k8s.io/pause:3.10\n"} {
		if !bytes.Contains(text, []byte(line)) {
			t.Errorf("scenario lacks %q:\n%s", line, text)
		}
	}
	sc, err := Load(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	f := sc.fakeNodeConfig(1)
	if got := fakenode.FormatImages(f.Images); got != "registry.k8s.io/pause:3.10=750000" {
		t.Errorf("loaded node images %s", got)
	}
	var summary bytes.Buffer
	s.PrintSummary(&summary)
	if !strings.Contains(summary.String(), "Images: 4 of the 4 the nodes report (those at least half of a group's nodes report), 1 of them in every group") {
		t.Errorf("summary:\n%s", summary.String())
	}
}
