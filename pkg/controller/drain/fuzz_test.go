package drain

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzLoadRules: any --drain-rules file loads or is refused with an error
// naming the flag and the file, never a panic; a file that loads has at
// least one condition and a selector.
func FuzzLoadRules(f *testing.F) {
	head := "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\n"
	for _, s := range []string{
		head + "conditions:\n- KernelDeadlock=True,10m\n- {type: Ready, status: Unknown, minDuration: 30m}\nnodeSelector: pool in (batch)\n",
		head + "conditions: [KernelDeadlock]\nnodeExpression: '!has(node.metadata.labels.critical)'\nwindows: ['Mon-Fri 22:00-06:00']\ntimeZone: Europe/Paris\n",
		head + "conditions:\n- {type: MemoryPressure, forceAfter: 2h}\n",
		head + "conditions: [{type: X, minDuration: [1]}]\n",
		head + "conditions: [KernelDeadlock]\nwindows: [{a: b}]\n",
		head + "timeZone: UTC\n",
		head,
		"kind: DrainRules\n",
		"",
		"{",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := LoadRules(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--drain-rules: ") || !strings.Contains(err.Error(), "rules.yaml") {
				t.Errorf("error %q does not name --drain-rules and the file", err)
			}
			return
		}
		if len(r.Conditions) == 0 || r.Selector == nil {
			t.Errorf("loaded rules without conditions or selector: %+v", r)
		}
	})
}

// FuzzReadState: what drain reads back from a node (its annotations and the
// DrainScheduled condition's message, which Draino or a person may have
// written) never panics, and a time read from it is never before the
// second it names: a wait measured from it is never shorter than written.
func FuzzReadState(f *testing.F) {
	for _, s := range [][3]string{
		{"2", "2026-11-24T10:00:00.000000000Z", "Drain activity scheduled 2026-11-24T10:00:00.123456789Z"},
		{"x", "2026-11-24T10:00:00Z", "Drain activity scheduled 2026-11-24T10:00:00Z | Completed: 2026-11-24T10:05:00Z"},
		{"-1", "yesterday", "Drain activity scheduled | Failed: "},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, attempts, blockedSince, message string) {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
			AnnotationConditions: "KernelDeadlock=True", AnnotationAttempts: attempts, AnnotationBlockedSince: blockedSince}},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: ConditionDrainScheduled, Status: v1.ConditionFalse, Message: message}}}}
		s := readState(n)
		if parsed, err := time.Parse(time.RFC3339Nano, blockedSince); err == nil && s.blockedSince.Before(parsed) {
			t.Errorf("blocked since %v read as %v, before it", parsed, s.blockedSince)
		}
		_ = s.retryAt(time.Minute)
	})
}

// FuzzReadBlocked: the record of blocked pods on a node is cluster input;
// whatever it holds, reading it never fails, and a time it returns is
// never earlier than the one written (a count is never longer than real).
func FuzzReadBlocked(f *testing.F) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	f.Add(`{"drain":"2026-11-24T10:00:00.000000000Z","pods":{"u1":{"pod":"ns/a","since":"2026-11-24T10:01:00.5Z"}}}`)
	f.Add(`{"drain":"2026-11-24T10:00:00.000000000Z","pods":{"u1":{"since":"2026-11-24T10:01:00Z"}}}`)
	f.Add(`{"drain":"2026-11-24T10:00:00Z"}`)
	f.Add(`{"pods":null}`)
	f.Add(`not json`)
	f.Fuzz(func(t *testing.T, v string) {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationBlocked: v}}}
		for uid, since := range readBlocked(n, t0) {
			var rec blockRecord
			if err := json.Unmarshal([]byte(v), &rec); err != nil {
				t.Fatalf("read %v from a record that does not parse", since)
			}
			if written, err := time.Parse(time.RFC3339Nano, rec.Pods[uid].Since); err != nil || since.Before(written) {
				t.Errorf("pod %s: since %v read as %v", uid, rec.Pods[uid].Since, since)
			}
		}
	})
}

// FuzzReadMove: a Deployment's move record is cluster input; whatever it
// holds, reading it never fails, and a record it returns names a node, a positive surge and
// replicas that are not negative (an undo never scales to nonsense).
func FuzzReadMove(f *testing.F) {
	f.Add(`{"node":"n1","replicas":1,"surge":1,"pods":{"web-1":""},"since":"2026-11-27T10:00:00.000000000Z"}`)
	f.Add(`{"node":"n1","replicas":-3,"surge":1}`)
	f.Add(`{"surge":"x"}`)
	f.Fuzz(func(t *testing.T, v string) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationMove: v}}}
		if r := readMove(d); r != nil && (r.Node == "" || r.Surge <= 0 || r.Replicas < 0) {
			t.Errorf("record %+v from %q", r, v)
		}
	})
}
