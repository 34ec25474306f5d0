package simulate

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// Image is an entry of cluster.images: a container image the fake nodes
// can report in node.status.images, with its name (or up to five names, as
// a kubelet reports its repo digests and tags) and its size.
// cluster.node.images and a node group's images name it by any of its names.
type Image struct {
	Name  string    `yaml:"name"`
	Names []string  `yaml:"names"`
	Size  ImageSize `yaml:"size"`
}

// names is Name, or Names.
func (im *Image) names() []string {
	if im.Name != "" {
		return append([]string{im.Name}, im.Names...)
	}
	return im.Names
}

// ImageSize is an image's size: bytes (73400320) or with a unit (750kB,
// 70MB, 1.2GB, 512MiB), as fakenode.ParseImageSize reads it.
type ImageSize struct {
	Bytes int64
	set   bool
}

// UnmarshalYAML parses the size and names the line on error.
func (z *ImageSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return configfile.LineError(n, "image size: write a number of bytes with an optional unit, e.g. size: 70MB")
	}
	v, err := fakenode.ParseImageSize(n.Value)
	if err != nil {
		return configfile.LineError(n, "image %v", err)
	}
	z.Bytes, z.set = v, true
	return nil
}

// imageTable maps every name of cluster.images to its image.
type imageTable map[string]v1.ContainerImage

func (s *Scenario) imageTable() imageTable {
	t := imageTable{}
	for i := range s.Cluster.Images {
		im := &s.Cluster.Images[i]
		ci := v1.ContainerImage{Names: im.names(), SizeBytes: im.Size.Bytes}
		for _, name := range ci.Names {
			if _, dup := t[name]; !dup {
				t[name] = ci
			}
		}
	}
	return t
}

// resolve turns names of the table into the images a fake node reports,
// each image once; unknown names are left out (checkImages reports them).
func (t imageTable) resolve(names []string) []v1.ContainerImage {
	var out []v1.ContainerImage
	for _, name := range names {
		ci, ok := t[name]
		if ok && !slices.ContainsFunc(out, func(o v1.ContainerImage) bool { return o.Names[0] == ci.Names[0] }) {
			out = append(out, ci)
		}
	}
	return out
}

// checkImages validates cluster.images, the names node.images and the
// node groups' images give, and kubelet.nodeStatusMaxImages.
func (s *Scenario) checkImages(clusterNode *yaml.Node) []lineError {
	var errs []lineError
	at := func(n *yaml.Node, format string, args ...any) {
		line := 1
		if n != nil {
			line = n.Line
		}
		errs = append(errs, lineError{line, fmt.Sprintf(format, args...)})
	}
	if n := s.Cluster.Kubelet.NodeStatusMaxImages; n < -1 {
		at(field(field(clusterNode, "kubelet"), "nodeStatusMaxImages"), "cluster.kubelet.nodeStatusMaxImages %d: give how many images a node reports at most (the largest first), or -1 for all; leave it out for the kubelet's %d", n, fakenode.DefaultNodeStatusMaxImages)
	}
	imagesNode := field(clusterNode, "images")
	owner := map[string]int{} // name -> index in cluster.images
	for i := range s.Cluster.Images {
		im := &s.Cluster.Images[i]
		n := item(imagesNode, i)
		where := fmt.Sprintf("cluster.images[%d]", i)
		names := im.names()
		switch {
		case im.Name != "" && len(im.Names) > 0:
			at(n, "%s: give name or names, not both", where)
		case len(names) == 0:
			at(n, "%s: name is missing, e.g. - {name: registry.k8s.io/pause:3.10, size: 750kB}", where)
		case len(names) > fakenode.MaxNamesPerImage:
			at(field(n, "names"), "%s: %d names; a kubelet reports at most %d names per image", where, len(names), fakenode.MaxNamesPerImage)
		}
		for _, name := range names {
			if err := fakenode.ValidateImageName(name); err != nil {
				at(n, "%s: %v", where, err)
			} else if j, dup := owner[name]; dup {
				at(n, "%s: image name %q is in cluster.images[%d] already: list each image once", where, name, j)
			} else {
				owner[name] = i
			}
		}
		if !im.Size.set {
			at(n, "%s: size is missing: give the image's size, e.g. size: 70MB (kube-scheduler's ImageLocality score weighs images by size)", where)
		}
	}
	used := make([]bool, len(s.Cluster.Images))
	refs := func(list *yaml.Node, names []string, where string) {
		seen := map[int]string{}
		for j, name := range names {
			i, ok := owner[name]
			switch {
			case !ok && len(s.Cluster.Images) == 0:
				at(item(list, j), "%s[%d]: image %q: the cluster has no images table; add cluster.images: [{name: %s, size: SIZE}]", where, j, name, name)
			case !ok:
				at(item(list, j), "%s[%d]: image %q is not in cluster.images; add it there with its size, e.g. - {name: %s, size: 70MB}", where, j, name, name)
			case seen[i] == name:
				at(item(list, j), "%s[%d]: image %q is listed twice", where, j, name)
			case seen[i] != "":
				at(item(list, j), "%s[%d]: image %q is listed already, by its name %q", where, j, name, seen[i])
			default:
				seen[i], used[i] = name, true
			}
		}
	}
	refs(field(field(clusterNode, "node"), "images"), s.Cluster.Node.Images, "cluster.node.images")
	groupsNode := field(clusterNode, "nodeGroups")
	for g, grp := range s.Cluster.NodeGroups {
		refs(field(item(groupsNode, g), "images"), grp.Images, fmt.Sprintf("cluster.nodeGroups[%d].images", g))
	}
	for i, u := range used {
		if !u && len(s.Cluster.Images[i].names()) > 0 {
			at(item(imagesNode, i), "cluster.images[%d] (%s): no node reports it; name it in cluster.node.images (every node) or a node group's images, or remove it",
				i, s.Cluster.Images[i].names()[0])
		}
	}
	return errs
}
