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
