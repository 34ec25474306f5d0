package outofservice

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

var (
	t0       = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	person   = confirmation{source: SourcePerson, detail: `annotation nodeshepherd.io/out-of-service="psu dead"`}
	provider = confirmation{source: SourceCloudProvider, detail: "test reports the machine shut down or gone"}
	fenced   = confirmation{source: SourceFencing, detail: "https://fence answers that the machine of n1 is powered off"}
	// policy is a remediation policy's Fence for the current boot (input
	// leaves out one for another boot: TestRemediationConfirmationInput).
	policy = confirmation{source: SourceRemediation, detail: `remediation policy gpu, step 4 (Fence), for boot ID "b1"`}
)

// base is a node silent for exactly the configured 5 minutes, confirmed by
// a person, in a normal zone, with room in the budget.
func base() input {
	return input{now: t0, node: "n1", silentSince: t0.Add(-5 * time.Minute), confirmations: []confirmation{person},
		bootID: "b1", confirmationBootID: "b1", confirmationStamped: true, zone: "z1", zoneState: nodetopology.StateNormal, clusterState: nodetopology.StateNormal,
		outOfService: 0, limit: 1, after: 5 * time.Minute}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*input)
		action  string
		code    string
		retryAt time.Time
		msgHas  string
	}{
		// Confirmation sources × silence.
		{"person, silent long enough", func(*input) {}, actTaint, codeConfirmed, time.Time{}, "confirmed dead by person"},
		{"provider, silent long enough", func(in *input) { in.confirmations = []confirmation{provider}; in.provider = providerDead }, actTaint, codeConfirmed, time.Time{}, "cloud-provider"},
		{"both sources", func(in *input) { in.confirmations = []confirmation{person, provider} }, actTaint, codeConfirmed, time.Time{}, "person (annotation"},
		{"no confirmation", func(in *input) { in.confirmations = nil }, actNothing, "", time.Time{}, ""},
		{"provider error is no confirmation", func(in *input) { in.confirmations = nil; in.provider = providerUnknown }, actNothing, "", time.Time{}, ""},
		{"provider says running", func(in *input) { in.confirmations = nil; in.provider = providerRunning }, actNothing, "", time.Time{}, ""},
		{"silent one second too short", func(in *input) { in.silentSince = t0.Add(-5*time.Minute + time.Second) }, actWait, codeSilentTooShort, t0.Add(time.Second), "once NotReady for 5m0s"},
		{"confirmed but Ready", func(in *input) { in.ready = true }, actRefuse, codeNodeReady, time.Time{}, "the node is Ready"},
		// An answer that the machine runs vetoes any confirmation (seed 70030).
		{"person, the provider says running", func(in *input) { in.provider, in.machineRuns = providerRunning, "the cloud provider fake" }, actRefuse, codeMachineRuns, time.Time{}, "the cloud provider fake answers that the machine runs"},
		{"fencing, the provider says running", func(in *input) {
			in.confirmations, in.fencing, in.machineRuns = []confirmation{fenced}, providerDead, "the cloud provider fake"
		}, actRefuse, codeMachineRuns, time.Time{}, "answers that the machine runs"},
		{"person, the fencing endpoint says running, zone disrupted", func(in *input) {
			in.fencing, in.machineRuns, in.zoneState = providerRunning, "the fencing endpoint https://fence", nodetopology.StateFullDisruption
		}, actRefuse, codeMachineRuns, time.Time{}, "https://fence answers that the machine runs"},
		{"tainted by someone else", func(in *input) { in.taintedByOther = true }, actNothing, "", time.Time{}, ""},
		// Zone states: every source confirms the machine itself, so a
		// disruption does not hold a confirmed node back; it is said.
		{"zone partially disrupted", func(in *input) { in.zoneState = nodetopology.StatePartialDisruption }, actTaint, codeConfirmed, time.Time{}, `zone "z1" is in PartialDisruption, overridden`},
		{"zone fully disrupted", func(in *input) { in.zoneState = nodetopology.StateFullDisruption }, actTaint, codeConfirmed, time.Time{}, "FullDisruption, overridden"},
		{"cluster disrupted", func(in *input) { in.clusterState = nodetopology.StatePartialDisruption }, actTaint, codeConfirmed, time.Time{}, "the cluster is in PartialDisruption"},
		// A fencing endpoint alone confirms, but not in a disruption.
		{"fencing, normal zone", func(in *input) { in.confirmations = []confirmation{fenced}; in.fencing = providerDead }, actTaint, codeConfirmed, time.Time{}, "fencing-webhook"},
		{"fencing only, zone disrupted", func(in *input) {
			in.confirmations = []confirmation{fenced}
			in.zoneState = nodetopology.StatePartialDisruption
		}, actRefuse, codeDisruption, time.Time{}, `zone "z1" is in PartialDisruption, and only the cloud provider or a person`},
		{"fencing only, cluster disrupted", func(in *input) {
			in.confirmations = []confirmation{fenced}
			in.clusterState = nodetopology.StateFullDisruption
		}, actRefuse, codeDisruption, time.Time{}, "the cluster is in FullDisruption"},
		{"fencing and a person, zone disrupted", func(in *input) {
			in.confirmations = []confirmation{fenced, person}
			in.zoneState = nodetopology.StateFullDisruption
		}, actTaint, codeConfirmed, time.Time{}, "overridden by the confirmation"},
		// A remediation policy's Fence confirms like the fencing endpoint:
		// after the silence, within the budget, never a Ready node, and
		// never in a disrupted zone or cluster unless a person or the
		// provider confirms too.
		{"remediation, silent long enough", func(in *input) { in.confirmations = []confirmation{policy} }, actTaint, codeConfirmed, time.Time{},
			`confirmed dead by remediation-policy (remediation policy gpu, step 4 (Fence), for boot ID "b1")`},
		{"remediation, silent one second too short", func(in *input) {
			in.confirmations, in.silentSince = []confirmation{policy}, t0.Add(-5*time.Minute+time.Second)
		}, actWait, codeSilentTooShort, t0.Add(time.Second), "remediation-policy"},
		{"remediation, Ready", func(in *input) { in.confirmations, in.ready = []confirmation{policy}, true }, actRefuse, codeNodeReady, time.Time{}, "the node is Ready"},
		{"remediation, budget full", func(in *input) { in.confirmations, in.outOfService = []confirmation{policy}, 1 }, actRefuse, codeBudget, time.Time{}, "the budget is 1"},
		{"remediation only, zone disrupted", func(in *input) {
			in.confirmations, in.zoneState = []confirmation{policy}, nodetopology.StatePartialDisruption
		}, actRefuse, codeDisruption, time.Time{}, `zone "z1" is in PartialDisruption, and only the cloud provider or a person`},
		{"remediation only, zone fully disrupted", func(in *input) {
			in.confirmations, in.zoneState = []confirmation{policy}, nodetopology.StateFullDisruption
		}, actRefuse, codeDisruption, time.Time{}, "FullDisruption"},
		{"remediation only, cluster disrupted", func(in *input) {
			in.confirmations, in.clusterState = []confirmation{policy}, nodetopology.StatePartialDisruption
		}, actRefuse, codeDisruption, time.Time{}, "the cluster is in PartialDisruption"},
		{"remediation and fencing, zone disrupted", func(in *input) {
			in.confirmations, in.zoneState = []confirmation{fenced, policy}, nodetopology.StateFullDisruption
		}, actRefuse, codeDisruption, time.Time{}, ""},
		{"remediation and the provider, zone disrupted", func(in *input) {
			in.confirmations, in.provider, in.zoneState = []confirmation{provider, policy}, providerDead, nodetopology.StateFullDisruption
		}, actTaint, codeConfirmed, time.Time{}, "overridden by the confirmation of cloud-provider"},
		{"remediation and a person, cluster disrupted", func(in *input) {
			in.confirmations, in.clusterState = []confirmation{person, policy}, nodetopology.StatePartialDisruption
		}, actTaint, codeConfirmed, time.Time{}, "overridden by the confirmation of person"},
		// Tainted on a Fence: its boot ended (input drops it), Ready: off.
		{"owned on a Fence, Ready after a reboot", func(in *input) { owned(in); in.confirmations, in.ready, in.bootID = nil, true, "b2" },
			actUntaint, codeRebooted, time.Time{}, `after a reboot (boot ID "b2", was "b1")`},
		{"owned on a Fence, rebooted, not Ready yet", func(in *input) { owned(in); in.confirmations, in.bootID = nil, "b2" },
			actRefuse, codeStillSilent, time.Time{}, "still silent"},
		{"owned on a Fence, Ready, same boot, still fenced", func(in *input) { owned(in); in.confirmations, in.ready = []confirmation{policy}, true },
			actRefuse, codeNotRebooted, time.Time{}, "remediation-policy"},
		{"owned on a Fence, Ready, same boot, repair ended", func(in *input) { owned(in); in.confirmations, in.ready = nil, true },
			actUntaint, codeWithdrawn, time.Time{}, ""},
		{"owned, silent, fencing error", func(in *input) { owned(in); in.confirmations = nil; in.fencing = providerUnknown }, actNothing, "", time.Time{}, ""},
		{"owned, Ready, fencing says powered on", func(in *input) { owned(in); in.ready = true; in.confirmations = nil; in.fencing = providerRunning }, actUntaint, codeWithdrawn, time.Time{}, "no longer confirmed"},
		{"disrupted zone without confirmation", func(in *input) { in.zoneState = nodetopology.StateFullDisruption; in.confirmations = nil }, actNothing, "", time.Time{}, ""},
		// Budget.
		{"budget full", func(in *input) { in.outOfService = 1 }, actRefuse, codeBudget, time.Time{}, "1 nodes are out of service, the budget is 1"},
		{"budget zero", func(in *input) { in.limit = 0 }, actRefuse, codeBudget, time.Time{}, "the budget is 0"},
		{"budget full but not silent long enough", func(in *input) { in.outOfService = 1; in.silentSince = t0 }, actWait, codeSilentTooShort, t0.Add(5 * time.Minute), ""},
		// Taking back.
		{"owned, still silent, still confirmed", func(in *input) { owned(in) }, actNothing, "", time.Time{}, ""},
		{"owned, still silent, confirmation withdrawn", func(in *input) { owned(in); in.confirmations = nil }, actRefuse, codeStillSilent, time.Time{}, "still silent"},
		{"owned, still silent, provider running again", func(in *input) { owned(in); in.confirmations = nil; in.provider = providerRunning }, actRefuse, codeStillSilent, time.Time{}, ""},
		{"owned, silent, provider error", func(in *input) { owned(in); in.confirmations = nil; in.provider = providerUnknown }, actNothing, "", time.Time{}, ""},
		{"owned, Ready after a reboot, still confirmed", func(in *input) { owned(in); in.ready = true; in.bootID = "b2" }, actUntaint, codeRebooted, time.Time{}, `boot ID "b2", was "b1"); the confirmation by person`},
		{"owned, Ready, same boot, withdrawn", func(in *input) { owned(in); in.ready = true; in.confirmations = nil }, actUntaint, codeWithdrawn, time.Time{}, "no longer confirmed"},
		{"owned, Ready, same boot, provider running", func(in *input) {
			owned(in)
			in.ready, in.confirmations, in.provider = true, nil, providerRunning
		}, actUntaint, codeWithdrawn, time.Time{}, ""},
		{"owned, Ready, same boot, provider error", func(in *input) {
			owned(in)
			in.ready, in.confirmations, in.provider = true, nil, providerUnknown
		}, actNothing, "", time.Time{}, ""},
		{"owned, Ready, same boot, still confirmed", func(in *input) { owned(in); in.ready = true }, actRefuse, codeNotRebooted, time.Time{}, "same boot ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.change(&in)
			if _, ok := personConfirmation(in.confirmations); !ok {
				// No person's confirmation: none recorded either
				// (TestDecideConfirmationBoot covers that).
				in.confirmationBootID, in.confirmationStamped = "", false
			}
			v := decide(in)
			if v.action != tc.action || v.code != tc.code || !v.retryAt.Equal(tc.retryAt) {
				t.Errorf("got %q/%q retry %v, want %q/%q retry %v (%s)", v.action, v.code, v.retryAt, tc.action, tc.code, tc.retryAt, v.message)
			}
			if !strings.Contains(v.message, tc.msgHas) {
				t.Errorf("message %q lacks %q", v.message, tc.msgHas)
			}
		})
	}
}

// A person's confirmation applies to the boot it was given for (issue 30).
func TestDecideConfirmationBoot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*input)
		action string
		record string // the boot to record
		drop   bool
		msgHas string
	}{
		{"new confirmation: recorded for the current boot", func(in *input) { in.confirmationBootID, in.confirmationStamped = "", false },
			actRecord, "b1", false, `for its boot ID "b1"`},
		{"new confirmation on a Ready node: recorded too", func(in *input) { in.ready, in.confirmationBootID, in.confirmationStamped = true, "", false },
			actRecord, "b1", false, ""},
		{"new confirmation, shown written during this boot: the how said", func(in *input) {
			in.confirmationBootID, in.confirmationStamped, in.bound = "", false, "it was added while the node reported boot ID \"b1\""
		}, actRecord, "b1", false, `(annotation nodeshepherd.io/out-of-service-confirmation-boot-id): it was added while`},
		// Issue 45 (4e): the boot it was written during, not the boot the
		// taint was recorded for.
		{"new confirmation written during boot b2 of a node tainted for boot b1", func(in *input) {
			owned(in)
			in.bootID, in.confirmationBootID, in.confirmationStamped = "b2", "", false
		}, actRecord, "b2", false, `boot ID "b2"`},
		{"new confirmation of an unknown boot: counts for nothing, said", func(in *input) {
			in.confirmations, in.confirmationBootID, in.confirmationStamped, in.unbound = nil, "", false, "Not counting the confirmation"
		}, actRefuse, "", false, "Not counting the confirmation"},
		{"unknown boot, another source confirms: tainted on it, the person's not counted", func(in *input) {
			in.confirmations, in.provider, in.confirmationBootID, in.confirmationStamped, in.unbound = []confirmation{provider}, providerDead, "", false, "Not counting the confirmation"
		}, actTaint, "", false, "confirmed dead by cloud-provider"},
		{"unknown boot, node tainted for b1, Ready on b2: taken back", func(in *input) {
			owned(in)
			in.ready, in.bootID, in.confirmations, in.confirmationBootID, in.confirmationStamped, in.unbound = true, "b2", nil, "", false, "Not counting the confirmation"
		}, actUntaint, "", false, "; Not counting the confirmation"},
		{"unknown boot, node tainted for b1 and still silent: kept, said", func(in *input) {
			owned(in)
			in.confirmations, in.confirmationBootID, in.confirmationStamped, in.unbound = nil, "", false, "Not counting the confirmation"
		}, actRefuse, "", false, "no confirmation is left"},
		{"recorded for this boot: the table decides", func(*input) {}, actTaint, "", false, ""},
		{"recorded for another boot, silent long enough: expired, not tainted", func(in *input) { in.bootID = "b2" },
			actExpire, "", false, `given for boot ID "b1", the node now reports boot ID "b2"`},
		{"recorded for another boot, Ready", func(in *input) { in.bootID, in.ready = "b2", true }, actExpire, "", false, ""},
		{"recorded for another boot, a provider confirms too: expired first", func(in *input) {
			in.bootID = "b2"
			in.confirmations, in.provider = []confirmation{person, provider}, providerDead
		}, actExpire, "", false, ""},
		{"owned, rebooted and Ready: removed with the taint", func(in *input) { owned(in); in.ready, in.bootID = true, "b2" },
			actUntaint, "", true, `was given for boot ID "b1" and is removed with the taint`},
		{"owned, rebooted, not Ready yet: expired, taint kept", func(in *input) { owned(in); in.bootID = "b2" }, actExpire, "", false, ""},
		{"owned, rebooted and Ready, confirmed for the new boot: kept", func(in *input) {
			owned(in)
			in.ready, in.bootID, in.confirmationBootID = true, "b2", "b2"
		}, actUntaint, "", false, ""},
		{"recorded boot of a withdrawn confirmation: forgotten", func(in *input) { in.confirmations = nil }, actForget, "", false, AnnotationConfirmationBootID},
		{"no confirmation, nothing recorded", func(in *input) { in.confirmations, in.confirmationStamped = nil, false }, actNothing, "", false, ""},
		// The sequence after a fix that only removed the taint:
		// boot b2 partitioned long enough, b1's confirmation still there.
		{"partition of the next boot with the old confirmation", func(in *input) { in.bootID, in.silentSince = "b2", t0.Add(-time.Hour) },
			actExpire, "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.change(&in)
			v := decide(in)
			if v.action != tc.action || v.confirmationBootID != tc.record || v.dropConfirmation != tc.drop {
				t.Errorf("got %q record %q drop %v, want %q record %q drop %v (%s)", v.action, v.confirmationBootID, v.dropConfirmation,
					tc.action, tc.record, tc.drop, v.message)
			}
			if !strings.Contains(v.message, tc.msgHas) {
				t.Errorf("message %q lacks %q", v.message, tc.msgHas)
			}
		})
	}
}

func owned(in *input) {
	in.owned, in.recordedBootID, in.outOfService = true, "b1", 1
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		nodes, total int
		pct          float64
		want         int
	}{
		{3, 100, 10, 3}, {3, 20, 10, 2}, {3, 5, 10, 1}, {3, 5, 0, 0}, {0, 100, 100, 0}, {10, 10, 100, 10},
	} {
		c := Config{MaxNodes: tc.nodes, MaxPercent: tc.pct}
		if got := c.limit(tc.total); got != tc.want {
			t.Errorf("limit(%d nodes, %v%%) of %d = %d, want %d", tc.nodes, tc.pct, tc.total, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"NaN percent", func(c *Config) { c.MaxPercent = math.NaN() }, "--max-out-of-service-percent must be between 0 and 100, got NaN"},
		{"negative percent", func(c *Config) { c.MaxPercent = -1 }, "--max-out-of-service-percent"},
		{"over 100 percent", func(c *Config) { c.MaxPercent = 100.5 }, "--max-out-of-service-percent"},
		{"negative count", func(c *Config) { c.MaxNodes = -1 }, "--max-out-of-service-nodes must be 0 or more"},
		{"zero after", func(c *Config) { c.After = 0 }, "--out-of-service-after must be positive"},
		{"fencing webhook over http", func(c *Config) { c.Fencing.URL = "http://fence.example" }, `--out-of-service-fencing-webhook-url "http://fence.example" must be an absolute https:// URL`},
		{"fencing webhook CA missing", func(c *Config) { c.Fencing.URL, c.Fencing.CAFile = "https://fence.example", "/nonexistent" }, "--out-of-service-fencing-webhook-ca-file"},
	} {
		c := DefaultConfig()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
