package fakenode

import (
	"cmp"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Kubelet facts about node.status.images (pkg/kubelet: the
// nodeStatusMaxImages setting and its nodestatus setter).
const (
	// DefaultNodeStatusMaxImages is the kubelet's --node-status-max-images:
	// it reports the largest images first and at most this many; -1: all.
	DefaultNodeStatusMaxImages = 50
	// MaxNamesPerImage is how many names (repo digests, then tags) a
	// kubelet reports per image.
	MaxNamesPerImage = 5
	// MaxImageSize bounds an image's size, so that a typo (70EB) is an
	// error rather than an overflow.
	MaxImageSize = int64(1) << 40 // 1Ti
	// maxImageNameLength is a reference's longest name (255) with a tag
	// (128) and a long digest, with room to spare.
	maxImageNameLength = 512
)

// imageReference approximates the container image reference grammar of
// the distribution project: [domain[:port]/]path[:tag][@digest].
var imageReference = regexp.MustCompile(`^` +
	`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?` + // domain
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` + // path
	`(?::[\w][\w.-]{0,127})?` + // tag
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?` + // digest
	`$`)

// ValidateImageName checks that name is a container image reference such
// as registry.k8s.io/pause:3.10, nginx:1.27 or nginx@sha256:<hex>, the
// names a kubelet reports.
func ValidateImageName(name string) error {
	if len(name) > maxImageNameLength || !imageReference.MatchString(name) {
		return fmt.Errorf("image name %q is not an image reference such as registry.k8s.io/pause:3.10, nginx:1.27 or nginx@sha256:<64 hex digits>", name)
	}
	return nil
}

// byteUnits are the units of an image size, lowercased: decimal (k, M, G,
// T) and binary (Ki, Mi, Gi, Ti), each with or without a B, in any case.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "ti": 1 << 40, "tib": 1 << 40,
}

var sizeSyntax = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// ParseImageSize parses an image's size in bytes: a number with an
// optional unit, decimal (750k, 70MB, 1.2GB) or binary (512Ki, 1.5GiB), in
// any case ("70mb" is 70 MB: sizes are never in millibytes), or a plain
// byte count (73400320). The result is a whole number of bytes up to
// MaxImageSize.
func ParseImageSize(s string) (int64, error) {
	m := sizeSyntax.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("size %q is not a number of bytes with an optional unit, such as 73400320, 750kB, 70MB, 1.2GB or 512MiB", s)
	}
	unit, ok := byteUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q; use B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), the B optional", s, m[2])
	}
	r, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, fmt.Errorf("size %q is not a number", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(unit))
	if r.Cmp(new(big.Rat).SetInt64(MaxImageSize)) > 0 {
		return 0, fmt.Errorf("size %q is larger than the limit of 1TiB per image", s)
	}
	if !r.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return r.Num().Int64(), nil
}

// FormatImageSize writes a size for people: three significant digits and
// a decimal unit, as `docker images` does (73.4MB); exact only when the
// size is round.
func FormatImageSize(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	f, i := float64(n), 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	return strconv.FormatFloat(f, 'g', 3, 64) + units[i]
}

// ParseImages parses the value of --images: a comma-separated list of
// NAME=SIZE, e.g. registry.k8s.io/pause:3.10=750kB,nginx:1.27=70MB (one name
// per image; a scenario's cluster.images gives several). Names are
// validated and may be listed once.
func ParseImages(s string) ([]v1.ContainerImage, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []v1.ContainerImage
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, size, ok := cutLast(part, "=")
		name, size = strings.TrimSpace(name), strings.TrimSpace(size)
		if !ok || name == "" || size == "" {
			return nil, fmt.Errorf("images %q: %q is not NAME=SIZE; write e.g. registry.k8s.io/pause:3.10=750kB,nginx:1.27=70MB", s, part)
		}
		if err := ValidateImageName(name); err != nil {
			return nil, fmt.Errorf("images %q: %w", s, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("images %q: image %q is listed twice", s, name)
		}
		seen[name] = true
		n, err := ParseImageSize(size)
		if err != nil {
			return nil, fmt.Errorf("images %q: image %s: %w", s, name, err)
		}
		out = append(out, v1.ContainerImage{Names: []string{name}, SizeBytes: n})
	}
	return out, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// FormatImages writes images as ParseImages reads them (their first
// names, sizes in bytes).
func FormatImages(images []v1.ContainerImage) string {
	parts := make([]string, 0, len(images))
	for _, im := range images {
		if len(im.Names) > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", im.Names[0], im.SizeBytes))
		}
	}
	return strings.Join(parts, ",")
}

// validateImages checks one list of images: 1 to MaxNamesPerImage valid
// names each, no name twice, sizes from 0 to MaxImageSize.
func validateImages(images []v1.ContainerImage, where string) []error {
	var errs []error
	seen := map[string]bool{}
	for i, im := range images {
		if len(im.Names) == 0 || len(im.Names) > MaxNamesPerImage {
			errs = append(errs, fmt.Errorf("%s: image %d has %d names; give 1 to %d (a kubelet reports at most %d)", where, i, len(im.Names), MaxNamesPerImage, MaxNamesPerImage))
		}
		for _, name := range im.Names {
			if err := ValidateImageName(name); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			} else if seen[name] {
				errs = append(errs, fmt.Errorf("%s: image name %q is listed twice", where, name))
			}
			seen[name] = true
		}
		if im.SizeBytes < 0 || im.SizeBytes > MaxImageSize {
			errs = append(errs, fmt.Errorf("%s: image %v: size %d bytes must be from 0 to %d (1TiB)", where, im.Names, im.SizeBytes, MaxImageSize))
		}
	}
	return errs
}

// mergeImages is every node's images and then a group's, an image of both
// (the same names and size) once; an image of the group that shares a name
// with one of every node's but differs is an error.
func mergeImages(all, group []v1.ContainerImage) ([]v1.ContainerImage, error) {
	if len(group) == 0 {
		return all, nil
	}
	out := slices.Clone(all)
	for _, g := range group {
		i := slices.IndexFunc(all, func(a v1.ContainerImage) bool {
			return slices.ContainsFunc(g.Names, func(n string) bool { return slices.Contains(a.Names, n) })
		})
		switch {
		case i < 0:
			out = append(out, g)
		case !slices.Equal(all[i].Names, g.Names) || all[i].SizeBytes != g.SizeBytes:
			return nil, fmt.Errorf("image %v (%d bytes) differs from every node's image %v (%d bytes): give an image the same names and size everywhere", g.Names, g.SizeBytes, all[i].Names, all[i].SizeBytes)
		}
	}
	return out, nil
}

// reportedImages is what a kubelet puts in node.status.images: the largest
// images first (equal sizes by name, for a stable order), at most max
// (-1: all). The result is new; the images' Names are shared.
func reportedImages(images []v1.ContainerImage, max int) []v1.ContainerImage {
	if len(images) == 0 {
		return nil
	}
	out := slices.Clone(images)
	slices.SortStableFunc(out, func(a, b v1.ContainerImage) int {
		if c := cmp.Compare(b.SizeBytes, a.SizeBytes); c != 0 {
			return c
		}
		return cmp.Compare(a.Names[0], b.Names[0])
	})
	if max >= 0 && len(out) > max {
		out = out[:max]
	}
	return out
}
