package scheduler

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUnsupportedMessage(t *testing.T) {
	term := v1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}
	for _, tc := range []struct {
		name string
		mod  func(*v1.Pod)
		want string
	}{
		{"plain pod", func(*v1.Pod) {}, ""},
		{"node affinity is supported", func(p *v1.Pod) { p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{}} }, ""},
		{"configmap and emptyDir volumes are supported", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "a", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "b", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}}
		}, ""},
		{"topology spread constraints are supported", func(p *v1.Pod) {
			p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: v1.DoNotSchedule}}
		}, ""},
		{"pod affinity and anti-affinity are supported", func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term}},
				PodAffinity: &v1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term}}}}
		}, ""},
		{"claim volumes and inline CSI volumes are supported", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
				{Name: "secrets", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}}}
		}, ""},
		{"several at once, in a stable order", func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "disk", VolumeSource: v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "d"}}},
				{Name: "lun", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{}}}}
			p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu"}}
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{}
		}, `nodeshepherd-scheduler does not support: inline gcePersistentDisk, awsElasticBlockStore, rbd, iscsi, azureDisk, cinder, vsphereVolume or portworxVolume volumes ("disk", "lun"), ` +
			`spec.resourceClaims (DRA), spec.schedulingGroup (gang scheduling); use kube-scheduler for this pod`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("p", 0, 100)
			tc.mod(p)
			if got := unsupported(p, true, false); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A scheduler built without the storage informers refuses claim volumes.
func TestUnsupportedClaimsWithoutStorageInformers(t *testing.T) {
	p := pod("p", 0, 100)
	p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		{Name: "logs", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "logs-0"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}}
	want := `nodeshepherd-scheduler does not support: persistentVolumeClaim volumes (pvc "data", "logs-0"), ephemeral volumes ("scratch"); use kube-scheduler for this pod`
	if got := unsupported(p, false, false); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := unsupported(p, true, false); got != "" {
		t.Errorf("with the storage informers: %q", got)
	}
}

// A refused pod sleeps through cluster events and the unschedulable
// timeout; only a change of its own spec wakes it.
func TestQueueStuckPodWaitsForItsSpec(t *testing.T) {
	q, clk := newTestQueue()
	old := pod("a", 1, 0)
	q.Add(old)
	p, cycle := pop(t, q)
	p.stuck = true
	q.MoveAll("NodeAdd", nil) // an event during the attempt does not send it to backoff
	q.Requeue(p, cycle, false)
	q.MoveAll("NodeAdd", nil)
	clk.Step(10 * time.Minute)
	q.flush()
	if l := q.Lens(); l[inUnschedulable] != 1 || l[inActive]+l[inBackoff] != 0 {
		t.Fatalf("a stuck pod was woken: %v", l)
	}
	status := old.DeepCopy()
	status.Status.Message = "x"
	q.Update(old, status)
	if l := q.Lens(); l[inUnschedulable] != 1 {
		t.Fatalf("a status change woke a stuck pod: %v", l)
	}
	changed := status.DeepCopy()
	changed.Labels = map[string]string{"fixed": "yes"}
	q.Update(status, changed)
	if l := q.Lens(); l[inUnschedulable] != 0 || p.stuck {
		t.Fatalf("a spec change did not wake the pod: %v, stuck=%v", l, p.stuck)
	}
}
