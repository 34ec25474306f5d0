package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
)

// A mutant file, test/chaos/mutants/NAME.patch, is a header of "Key: value"
// lines followed by a `git diff` (git apply ignores what comes before the
// first "diff --git"). Lines starting with # are comments.
//
//	Mutant: zone-rate-ignored
//	Invariant: zone-rules
//	Reverts: the rule, one sentence, and the commit that introduced it
//	Kinds: zone-partition,rack-partition
//	Seeds: 1,2,3,4,5
//	Duration: 45s
//	Config: grace=10s                         (optional; TestChaos flags, see configKeys)
//	Status: pending <what must land first>   (optional; then no diff)
//	Note: free text (optional)

// mutant is one parsed mutant file.
type mutant struct {
	Name      string
	File      string
	Invariant []string // any of them is the one expected
	Reverts   string
	Kinds     []string
	Seeds     []int64
	Duration  time.Duration
	// Config are TestChaos flags of the replicas' and the checker's
	// configuration, "KEY=VALUE" (configKeys), passed as -KEY=VALUE to
	// every seed of the mutant (and its baseline).
	Config []string
	// Pending says what must land in main before the mutant can be written
	// (its safety rule does not exist yet); a pending mutant has no diff.
	Pending string
	Note    string
	HasDiff bool
}

// maxDuration: a seed's fault window must leave room in the 10 minutes a
// mutant gets for the control plane's start and the progress wait.
const maxDuration = 5 * time.Minute

// repairKinds are test/chaos/repair_test.go's fault kinds (compared there too).
var repairKinds = []string{"repair-condition", "repair-condition-lasting", "pool-leave", "repair-blind", "repair-leave", "repair-leave-lagged", "repair-clear-unsent", "repair-crowded", "repair-refill", "repair-cutoff", "repair-restart", "repair-late-step", "drain-repair"}

// personKinds are test/chaos/person_test.go's fault kinds (compared there too).
var personKinds = []string{"confirm-then-powercycle", "fence-partition", "confirm-leaderless", "all-zones-lasting", "all-zones-failover", "confirm-cut-start", "confirm-cloud-blind", "confirm-leaderless-blind", "toleration-shortened"}

// knownInvariants are every name a violation can carry: the Checker's and
// the repair checker's.
func knownInvariants() []string {
	return []string{chaos.InvZoneRules, chaos.InvRunningForced, chaos.InvBudgets, chaos.InvToleration, chaos.InvUntainted,
		chaos.InvPDB, chaos.InvCIDR, chaos.InvReadiness, chaos.InvProgress, chaos.InvEarlyUnknown, chaos.InvEarlyTaint,
		chaos.InvCountdown, chaos.InvRateLimit, chaos.InvFenceRunning,
		chaos.InvRepairBrakes, chaos.InvRepairSelection, chaos.InvRepairLadder, chaos.InvRepairRequests, chaos.InvRepairProgress,
		chaos.InvRepairUnhealthy, chaos.InvRepairDrain}
}

// knownKinds are the fault kinds a schedule can draw.
func knownKinds() []string {
	var out []string
	for _, k := range chaos.AllKinds() {
		out = append(out, string(k))
	}
	return append(append(out, repairKinds...), personKinds...)
}

var headerKeys = []string{"Mutant", "Invariant", "Reverts", "Kinds", "Seeds", "Duration", "Config", "Status", "Note"}

// configKeys are the configuration a mutant's Config may set: TestChaos's
// flag of the same name (test/chaos/chaos_test.go; TestConfigKeysAreFlags
// compares), and how its value is checked.
var configKeys = map[string]func(string) error{
	// grace: nodeMonitorGracePeriod of the replicas and the checker (3s by
	// default), for the rules whose window a 3s grace makes shorter than
	// the checker's view lag.
	"grace": func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if d < time.Second || d > 30*time.Second {
			return fmt.Errorf("%v: want 1s to 30s", d)
		}
		return nil
	},
	// cluster-cidr: node IPAM's cluster range (10.244.0.0/18 in /26 blocks
	// by default), for full-range: a /22 holds 16 blocks, so 12 nodes and
	// the kind's newcomers fill it.
	"cluster-cidr": func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return err
		}
		if !p.Addr().Is4() || p.Bits() > 26 {
			return fmt.Errorf("%v: want an IPv4 range of at least one /26 block", p)
		}
		return nil
	},
	// stale-pod-status: fake kubelets that never re-post a pod status
	// someone else changed (the seed 002 incident), for the readiness
	// rules: only the controller gives marked pods their readiness back.
	"stale-pod-status": func(v string) error {
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("%q: want true or false", v)
		}
		return nil
	},
	// repair-delay: how long the fake cloud takes to act on a repair
	// request (0 by default), for repair-refill: the evicted pod's
	// replacement, bound to the node meanwhile, runs before the machine
	// goes, whatever the machine's load.
	"repair-delay": func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if d < 0 || d > 30*time.Second {
			return fmt.Errorf("%v: want 0s to 30s", d)
		}
		return nil
	},
}

// parseMutant reads and checks one mutant file.
func parseMutant(path string) (*mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(path), ".patch")
	m := &mutant{File: path}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if strings.HasPrefix(l, "diff --git ") {
			m.HasDiff = true
			break
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		key, val, ok := strings.Cut(l, ":")
		if !ok || !slices.Contains(headerKeys, key) {
			return nil, fmt.Errorf("%s:%d: %q is not a header line (want one of %s: VALUE, before the first \"diff --git\")", path, line, l, strings.Join(headerKeys, ", "))
		}
		if seen[key] {
			return nil, fmt.Errorf("%s:%d: %s given twice", path, line, key)
		}
		seen[key] = true
		val = strings.TrimSpace(val)
		switch key {
		case "Mutant":
			m.Name = val
		case "Invariant":
			m.Invariant = splitList(val)
		case "Reverts":
			m.Reverts = val
		case "Kinds":
			m.Kinds = splitList(val)
		case "Seeds":
			for _, s := range splitList(val) {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("%s:%d: seed %q is not a whole number", path, line, s)
				}
				m.Seeds = append(m.Seeds, n)
			}
		case "Duration":
			d, err := time.ParseDuration(val)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: Duration %q: %v (e.g. 45s)", path, line, val, err)
			}
			m.Duration = d
		case "Config":
			for _, kv := range splitList(val) {
				k, v, ok := strings.Cut(kv, "=")
				check := configKeys[k]
				if !ok || check == nil {
					var known []string
					for k := range configKeys {
						known = append(known, k)
					}
					sort.Strings(known)
					return nil, fmt.Errorf("%s:%d: Config %q: want KEY=VALUE with KEY one of %s", path, line, kv, strings.Join(known, ", "))
				}
				if err := check(v); err != nil {
					return nil, fmt.Errorf("%s:%d: Config %s: %v", path, line, k, err)
				}
				m.Config = append(m.Config, kv)
			}
		case "Status":
			p, ok := strings.CutPrefix(val, "pending")
			if !ok || strings.TrimSpace(p) == "" {
				return nil, fmt.Errorf("%s:%d: Status %q: the only status is \"pending WHAT MUST LAND FIRST\"", path, line, val)
			}
			m.Pending = strings.TrimSpace(p)
		case "Note":
			m.Note = val
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var missing []string
	for _, k := range []string{"Mutant", "Invariant", "Reverts", "Kinds", "Seeds", "Duration"} {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: header lacks %s (every mutant states Mutant, Invariant, Reverts, Kinds, Seeds, Duration)", path, strings.Join(missing, ", "))
	}
	if m.Name != name {
		return nil, fmt.Errorf("%s: Mutant %q differs from the file's name %q", path, m.Name, name)
	}
	if m.Reverts == "" {
		return nil, fmt.Errorf("%s: Reverts is empty: say which safety rule the mutant reverts", path)
	}
	if len(m.Invariant) == 0 {
		return nil, fmt.Errorf("%s: Invariant is empty", path)
	}
	for _, inv := range m.Invariant {
		if !slices.Contains(knownInvariants(), inv) {
			return nil, fmt.Errorf("%s: invariant %q is not one the checkers report (%s)", path, inv, strings.Join(knownInvariants(), ", "))
		}
	}
	if len(m.Seeds) == 0 {
		return nil, fmt.Errorf("%s: Seeds is empty", path)
	}
	if m.Duration <= 0 || m.Duration > maxDuration {
		return nil, fmt.Errorf("%s: Duration %v: want more than 0 and at most %v", path, m.Duration, maxDuration)
	}
	if m.Pending != "" {
		// Its kinds may be ones still to come (issue 45 point 2).
		if m.HasDiff {
			return nil, fmt.Errorf("%s: a pending mutant has no diff yet (remove the Status line once its rule is in main and the diff written)", path)
		}
		return m, nil
	}
	for _, k := range m.Kinds {
		if !slices.Contains(knownKinds(), k) {
			return nil, fmt.Errorf("%s: fault kind %q is not drawn by any schedule (%s)", path, k, strings.Join(knownKinds(), ", "))
		}
	}
	if !m.HasDiff {
		return nil, fmt.Errorf("%s: no diff (a line starting \"diff --git\") after the header; a mutant whose rule is not in main yet says Status: pending WHAT", path)
	}
	return m, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loadMutants parses every *.patch in dir, sorted by name.
func loadMutants(dir string) ([]*mutant, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.patch"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no mutants (*.patch) in %s", dir)
	}
	sort.Strings(paths)
	var out []*mutant
	var errs []string
	for _, p := range paths {
		m, err := parseMutant(p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out = append(out, m)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}
