package fakenode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseZones: any --zones value is refused with an error quoting it, or
// gives distinct valid zone label values with positive or unset counts that
// print back to the same zones.
func FuzzParseZones(f *testing.F) {
	for _, s := range []string{"zone-a,zone-b", "zone-a=20,zone-b=10", "a", "a=0", "a,,b", "a,a", "a=1=2", " a , b=3 ", "=5", "a=-1", "Zone_A.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		zones, err := ParseZones(s)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
				t.Errorf("error %q does not quote the input", err)
			}
			return
		}
		parts := make([]string, len(zones))
		seen := map[string]bool{}
		for i, z := range zones {
			if z.Name == "" || len(validation.IsValidLabelValue(z.Name)) > 0 || seen[z.Name] || z.Count < 0 {
				t.Fatalf("ParseZones(%q) accepted zone %+v", s, z)
			}
			seen[z.Name] = true
			parts[i] = z.Name
			if z.Count > 0 {
				parts[i] += fmt.Sprintf("=%d", z.Count)
			}
		}
		again, err := ParseZones(strings.Join(parts, ","))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(zones) {
			t.Errorf("%q parsed as %v, which prints back as %v, %v", s, zones, again, err)
		}
	})
}

// FuzzParseCondition: any fault's condition is refused with an error or has
// a type without separators and, when a status is required, a valid one.
func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{"KernelDeadlock=True", "Ready=Unknown", "Ready", "=True", "a b=True", "X=Maybe", "X=", "X==True"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, needStatus bool) {
		c, err := ParseCondition(s, needStatus)
		if err != nil {
			return
		}
		if c.Type == "" || strings.ContainsAny(string(c.Type), " ,:=") {
			t.Errorf("ParseCondition(%q) accepted type %q", s, c.Type)
		}
		switch c.Status {
		case "True", "False", "Unknown":
		case "":
			if needStatus {
				t.Errorf("ParseCondition(%q, true) accepted no status", s)
			}
		default:
			t.Errorf("ParseCondition(%q) accepted status %q", s, c.Status)
		}
	})
}

// FuzzFault: any fault the control socket receives (JSON, unknown fields
// refused) is refused by Validate, or has a known action and a target, a
// condition exactly when the action takes one (with a status to set),
// survivesReboot only on a condition being set, and a duration only where
// an opposite action undoes it.
func FuzzFault(f *testing.F) {
	for _, s := range []string{
		`{"action":"condition","target":{"nodes":["n"]},"condition":{"type":"KernelDeadlock","status":"True","survivesReboot":true},"duration":60000000000}`,
		`{"action":"clear-condition","target":{"all":true},"condition":{"type":"KernelDeadlock","survivesReboot":true}}`,
		`{"action":"partition","target":{"zone":"a"},"condition":{"type":"X","status":"True"}}`,
		`{"action":"machine-start","target":{"selector":"a=b"},"duration":1}`,
		`{"action":"condition","target":{"all":true},"condition":{"type":"X"}}`,
		`{"action":"heal","target":{}}`,
		`{"action":"x","survivesReboot":true}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fault Fault
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.DisallowUnknownFields()
		if dec.Decode(&fault) != nil || fault.Validate() != nil {
			return
		}
		if !slices.Contains(Actions, fault.Action) || fault.Target.String() == "" {
			t.Fatalf("accepted %s: unknown action or no target", s)
		}
		conditional := fault.Action == SetCondition || fault.Action == ClearCondition
		if c := fault.Condition; conditional != (c != nil) || c != nil && c.Type == "" || fault.Action == SetCondition && c.Status == "" {
			t.Fatalf("accepted %s: condition %+v for %s", s, c, fault.Action)
		}
		if c := fault.Condition; c != nil && c.SurvivesReboot && fault.Action != SetCondition {
			t.Fatalf("accepted %s: survivesReboot on %s", s, fault.Action)
		}
		if fault.Duration < 0 || fault.Duration > 0 && fault.Action.opposite() == "" {
			t.Fatalf("accepted %s: duration %v on %s", s, fault.Duration, fault.Action)
		}
	})
}

// FuzzParseImages: any --images value is refused with an error quoting it,
// or gives images a Config accepts (valid distinct names, one each, sizes
// from 0 to MaxImageSize) that print back to the same images.
func FuzzParseImages(f *testing.F) {
	for _, s := range []string{"registry.k8s.io/pause:3.10=750kB,nginx:1.27=70MB", "nginx=1", "nginx", "a=1,a=2", "a=1,,b=2", " a = 1.5GiB ",
		"a=1.5B", "a=2TiB", "A=1", "localhost:5000/x@sha256:" + strings.Repeat("0", 64) + "=3", "a==1", "a=1e3", "a=70mb", "=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		images, err := ParseImages(s)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
				t.Errorf("error %q does not quote the input", err)
			}
			return
		}
		if errs := validateImages(images, "images"); len(errs) > 0 {
			t.Fatalf("ParseImages(%q) accepted invalid images: %v", s, errs)
		}
		for _, im := range images {
			if len(im.Names) != 1 {
				t.Fatalf("ParseImages(%q) gave %d names to one image", s, len(im.Names))
			}
		}
		again, err := ParseImages(FormatImages(images))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(images) {
			t.Errorf("%q parsed as %v, which prints back as %v, %v", s, images, again, err)
		}
	})
}

// FuzzParseImageSize: any size is refused with an error quoting it, or is
// a whole number of bytes from 0 to MaxImageSize that a plain byte count
// and the same number with a B parse back to.
func FuzzParseImageSize(f *testing.F) {
	for _, s := range []string{"0", "750kB", "70MB", "1.2GB", "512KiB", "1.5GiB", "1.5B", "70mb", "-1", "1e6", "1TiB", "1.0000000000000000001TiB", "99999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseImageSize(s)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
				t.Errorf("error %q does not quote the input", err)
			}
			return
		}
		if n < 0 || n > MaxImageSize {
			t.Fatalf("ParseImageSize(%q) = %d, out of range", s, n)
		}
		for _, back := range []string{fmt.Sprint(n), fmt.Sprint(n) + "B"} {
			if again, err := ParseImageSize(back); err != nil || again != n {
				t.Errorf("%q parsed as %d, %q as %d, %v", s, n, back, again, err)
			}
		}
	})
}

// FuzzParseDeviceSet: any --devices value is refused with an error quoting
// it, or is a device set the API server accepts (Validate) that prints
// back to the same set.
func FuzzParseDeviceSet(f *testing.F) {
	for _, s := range []string{"gpu.fake.nodeshepherd.io=4", "gpu.example.com=2,model=a100,memory=80Gi,class=gpu", "g=1", "=1", "g=", "g=0",
		"g=129", "g=1,model=", "g=1,memory=-1", "g=1,,", "g=1,class=a=b", "G=1", "g=1,model=a,model=a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDeviceSet(s)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
				t.Errorf("error %q does not quote the input", err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("ParseDeviceSet(%q) accepted %+v: %v", s, d, err)
		}
		again, err := ParseDeviceSet(d.String())
		if err != nil || again.String() != d.String() || again.Memory.Cmp(d.Memory) != 0 {
			t.Errorf("%q parsed as %v, which prints back as %v, %v", s, d, again, err)
		}
	})
}
