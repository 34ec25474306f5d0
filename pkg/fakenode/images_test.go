package fakenode

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestParseImageSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "73400320": 73400320, "750kB": 750_000, "750KB": 750_000, "750k": 750_000, "70MB": 70_000_000, "70mb": 70_000_000,
		"70M": 70_000_000, "1.2GB": 1_200_000_000, "512KiB": 512 << 10, "512Ki": 512 << 10, "1.5GiB": 3 << 29, "5B": 5, " 2 MB ": 2_000_000,
		"1TiB": 1 << 40, "0.001kB": 1,
	}
	for in, want := range good {
		if got, err := ParseImageSize(in); err != nil || got != want {
			t.Errorf("ParseImageSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"": "not a number of bytes", "MB": "not a number of bytes", "-5MB": "not a number of bytes", "1e6": "not a number of bytes",
		"70 megabytes": "unknown unit", "1.5B": "not a whole number of bytes", "2TiB": "larger than the limit", "1,5MB": "not a number of bytes",
		"0x10": "not a number of bytes", "5 XB": "unknown unit",
	}
	for in, want := range bad {
		if _, err := ParseImageSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseImageSize(%q) error = %v, want %q", in, err, want)
		}
	}
}

func TestParseImages(t *testing.T) {
	got, err := ParseImages("registry.k8s.io/pause:3.10=750kB, nginx:1.27 = 70MB,localhost:5000/team/app@sha256:" + strings.Repeat("ab", 32) + "=1GiB")
	if err != nil {
		t.Fatal(err)
	}
	want := "registry.k8s.io/pause:3.10=750000,nginx:1.27=70000000,localhost:5000/team/app@sha256:" + strings.Repeat("ab", 32) + "=1073741824"
	if s := FormatImages(got); s != want {
		t.Errorf("parsed as %s, want %s", s, want)
	}
	if got, err := ParseImages(""); err != nil || got != nil {
		t.Errorf(`ParseImages("") = %v, %v; want none`, got, err)
	}
	for in, want := range map[string]string{
		"nginx":                       "is not NAME=SIZE",
		"nginx=":                      "is not NAME=SIZE",
		"=5MB":                        "is not NAME=SIZE",
		"a=1MB,,b=2MB":                "is not NAME=SIZE",
		"Nginx:1=5MB":                 "is not an image reference",
		"nginx:1.27=5MB,nginx:1.27=6": "listed twice",
		"nginx:1.27=5XB":              "image nginx:1.27: size \"5XB\": unknown unit",
		"my image=5MB":                "is not an image reference",
	} {
		_, err := ParseImages(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseImages(%q) error = %v, want %q and the input quoted", in, err, want)
		}
	}
}

func TestFormatImageSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 999: "999B", 750_000: "750kB", 73_391_234: "73.4MB", 1_200_000_000: "1.2GB", 1 << 40: "1.1TB"} {
		if got := FormatImageSize(n); got != want {
			t.Errorf("FormatImageSize(%d) = %s, want %s", n, got, want)
		}
	}
}

func images(spec string) []v1.ContainerImage {
	im, err := ParseImages(spec)
	if err != nil {
		panic(err)
	}
	return im
}

// Nodes report the largest images first (equal sizes by name), at most
// NodeStatusMaxImages, a group's on top of every node's; the nodes of a
// group share one list.
func TestReportedImages(t *testing.T) {
	cfg := Config{Client: &kubernetes.Clientset{}, NodeStatusMaxImages: 3,
		Images: images("pause:3.10=750kB,b:1=70MB,a:1=70MB"),
		Groups: []NodeGroup{
			{Name: "web", Zone: "z", Count: 2, Images: images("nginx:1.27=100MB,pause:3.10=750kB")},
			{Name: "db", Zone: "z", Count: 1},
		}}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	web0, web1, db := m.nodes[m.names[0]], m.nodes[m.names[1]], m.nodes[m.names[2]]
	if got := FormatImages(web0.images); got != "nginx:1.27=100000000,a:1=70000000,b:1=70000000" {
		t.Errorf("web node reports %s", got)
	}
	if got := FormatImages(db.images); got != "a:1=70000000,b:1=70000000,pause:3.10=750000" {
		t.Errorf("db node reports %s", got)
	}
	if &web0.images[0] != &web1.images[0] {
		t.Error("the nodes of a group have copies of the image list, not one shared list")
	}
	if got := m.fullStatus(db, metav1.Now()).Images; len(got) != 3 || &got[0] != &db.images[0] {
		t.Errorf("full status images %v, want the node's shared list", got)
	}

	cfg.NodeStatusMaxImages = -1
	if m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if got := len(m.nodes[m.names[0]].images); got != 4 {
		t.Errorf("with no cap, a web node reports %d images, want 4", got)
	}
	cfg.NodeStatusMaxImages = 0
	if m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if got := len(m.nodes[m.names[0]].images); got != 4 {
		t.Errorf("with the default cap (50), a web node reports %d images, want 4", got)
	}
	if m, err = New(Config{Client: &kubernetes.Clientset{}, Nodes: 1}); err != nil || m.nodes[m.names[0]].images != nil {
		t.Errorf("without images: %v, %v", m.nodes[m.names[0]].images, err)
	}
}

func TestValidateImages(t *testing.T) {
	base := func() Config {
		return Config{Client: &kubernetes.Clientset{}, Nodes: 1, Images: images("pause:3.10=750kB")}
	}
	for want, mutate := range map[string]func(*Config){
		"images: image 1 has 0 names": func(c *Config) { c.Images = append(c.Images, v1.ContainerImage{SizeBytes: 1}) },
		"image 1 has 6 names": func(c *Config) {
			c.Images = append(c.Images, v1.ContainerImage{Names: strings.Split("a,b,c,d,e,f", ",")})
		},
		`image name "pause:3.10" is listed`: func(c *Config) { c.Images = append(c.Images, c.Images[0]) },
		`image name "Bad" is not`:           func(c *Config) { c.Images[0].Names = []string{"Bad"} },
		"must be from 0 to":                 func(c *Config) { c.Images[0].SizeBytes = -1 },
		"node status max images must be -1": func(c *Config) { c.NodeStatusMaxImages = -2 },
		"node group 0 (g): images: image 0 ": func(c *Config) {
			c.Groups = []NodeGroup{{Name: "g", Zone: "z", Count: 1, Images: []v1.ContainerImage{{}}}}
		},
		"node group 0 (g): image [pause:3.10] (1 bytes) differs": func(c *Config) {
			c.Groups = []NodeGroup{{Name: "g", Zone: "z", Count: 1, Images: images("pause:3.10=1")}}
		},
	} {
		c := base()
		mutate(&c)
		c.Complete()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Validate() = %v", want, err)
		}
	}
	c := base()
	c.Groups = []NodeGroup{{Name: "g", Zone: "z", Count: 1, Images: images("pause:3.10=750kB,nginx:1=5MB")}}
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Errorf("a group repeating an image of every node's: %v", err)
	}
}

// The fake kubelet sends its images with its full status only: a heartbeat
// patches the conditions and leaves status.images alone.
func TestStatusPatchesCarryImagesOnlyWhenFull(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	var patches []map[string]map[string]json.RawMessage
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p map[string]map[string]json.RawMessage
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
			t.Errorf("patch: %v", err)
		}
		mu.Lock()
		patches = append(patches, p)
		mu.Unlock()
		return false, nil, nil
	})
	m, err := New(Config{Client: client, Nodes: 1, Images: images("pause:3.10=750kB,nginx:1.27=70MB")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := m.nodes[m.names[0]]
	if err := m.register(ctx, n); err != nil {
		t.Fatal(err)
	}
	created, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatImages(created.Status.Images); got != "nginx:1.27=70000000,pause:3.10=750000" {
		t.Errorf("registered with images %s", got)
	}
	if err := m.syncStatus(ctx, n); err != nil { // the full status
		t.Fatal(err)
	}
	n.dirty = true
	if err := m.syncStatus(ctx, n); err != nil { // a heartbeat with a change
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(patches) != 2 {
		t.Fatalf("%d status patches, want 2", len(patches))
	}
	var full []v1.ContainerImage
	if err := json.Unmarshal(patches[0]["status"]["images"], &full); err != nil || FormatImages(full) != "nginx:1.27=70000000,pause:3.10=750000" {
		t.Errorf("full status patch images %s (%v), want both, the largest first", patches[0]["status"]["images"], err)
	}
	if raw, ok := patches[1]["status"]["images"]; ok {
		t.Errorf("a heartbeat resends images: %s", raw)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil || len(node.Status.Images) != 2 {
		t.Errorf("after a heartbeat the Node reports images %v (%v), want 2", node.Status.Images, err)
	}
}

// A fake kubelet without images clears those an earlier process reported
// for the Node it adopts: its full status writes images: null.
func TestFullStatusClearsImagesOfAnAdoptedNode(t *testing.T) {
	client := fake.NewClientset()
	m, err := New(Config{Client: client, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := m.nodes[m.names[0]]
	old := m.object(n, metav1.Now())
	old.Status.Images = images("pause:3.10=750kB")
	if _, err := client.CoreV1().Nodes().Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.register(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := m.syncStatus(ctx, n); err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil || len(node.Status.Images) != 0 {
		t.Errorf("adopted Node still reports images %v (%v)", node.Status.Images, err)
	}
}
