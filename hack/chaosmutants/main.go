// Command chaosmutants measures the chaos checker by mutation (`make
// chaos-mutants`, docs/chaos.md "Mutants"): each mutant of
// test/chaos/mutants reverts one safety rule of a controller; it is applied
// to a scratch copy of the working tree, TestChaos is built there and run
// seed by seed, and the first seed whose run reports a violation catches it.
// Every mutant gets at most -budget of seed runs (10 minutes). A table of
// the results goes to stdout and, as markdown, to -out.
//
//	go run ./hack/chaosmutants [-mutant NAME,NAME] [-out FILE]
//	go run ./hack/chaosmutants -baseline [-mutant ...]   (or -mutant none)
//
// -baseline runs the same seeds, kinds and durations on the unmutated tree;
// its results are kept in -baseline-file, and a mutant caught by a seed that
// also failed on the baseline is said to prove nothing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	flagMutants  = flag.String("mutant", "", "mutants to run, comma-separated names (default: all); \"none\" is -baseline")
	flagBaseline = flag.Bool("baseline", false, "run the mutants' seeds on the unmutated tree (they must show no violation)")
	flagOut      = flag.String("out", "", "markdown table (default: bin/chaos-mutants.md, or bin/chaos-mutants-baseline.md with -baseline)")
	flagDir      = flag.String("dir", "test/chaos/mutants", "directory of the mutants")
	flagBudget   = flag.Duration("budget", 10*time.Minute, "wall time of seed runs per mutant at most")
	flagBaseFile = flag.String("baseline-file", "bin/chaos-mutants-baseline.json", "baseline results, read by mutant runs and written by -baseline")
	flagKeep     = flag.Bool("keep", false, "keep each mutant's scratch copy of the tree")
	flagLogs     = flag.String("logs", "bin/chaos-mutants", "directory for each seed's test output (NAME/seed-N.log), relative to the repository unless absolute")
	flagSeeds    = flag.String("seeds", "", "seeds to run instead of each mutant's Seeds, comma-separated (e.g. the baseline of the seed that caught one)")
)

// result is what one mutant (or one baseline configuration) came to.
type result struct {
	Mutant     string        `json:"mutant"`
	Expected   []string      `json:"expected"`
	Pending    string        `json:"pending,omitempty"`
	Outcome    string        `json:"outcome"` // yes, no, other-invariant, pending, error
	Seed       int64         `json:"seed,omitempty"`
	SeedsRun   []int64       `json:"seedsRun,omitempty"`
	ToCatch    time.Duration `json:"toCatch,omitempty"`
	Invariants []string      `json:"invariants,omitempty"`
	First      string        `json:"first,omitempty"`
	KindsUsed  bool          `json:"kindsUsed"`
	Why        string        `json:"why,omitempty"` // not caught, or an error
	Baseline   string        `json:"baseline,omitempty"`
}

// baselineRecord is one seed's run on the unmutated tree.
type baselineRecord struct {
	Violations []string  `json:"violations"`
	At         time.Time `json:"at"`
	Commit     string    `json:"commit,omitempty"`
}

// interrupted ends on SIGINT or SIGTERM: the seed running then is killed
// with its process group (its replicas and control plane), not left behind.
var interrupted = context.Background()

func main() {
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	interrupted = ctx
	err := run()
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "chaos-mutants: interrupted; the running seed was killed with its processes")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos-mutants:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos-mutants %s: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	all, err := loadMutants(*flagDir)
	if err != nil {
		return err
	}
	baseline := *flagBaseline
	names := splitList(*flagMutants)
	if slices.Equal(names, []string{"none"}) {
		baseline, names = true, nil
	}
	var chosen []*mutant
	for _, n := range names {
		i := slices.IndexFunc(all, func(m *mutant) bool { return m.Name == n })
		if i < 0 {
			var known []string
			for _, m := range all {
				known = append(known, m.Name)
			}
			return fmt.Errorf("no mutant %q in %s (there are: %s)", n, *flagDir, strings.Join(known, ", "))
		}
		chosen = append(chosen, all[i])
	}
	if len(names) == 0 {
		chosen = all
	}
	out := *flagOut
	if out == "" {
		out = "bin/chaos-mutants.md"
		if baseline {
			out = "bin/chaos-mutants-baseline.md"
		}
	}
	binDir := os.Getenv("NODESHEPHERD_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("the control plane is not built in %s (%v): run make controlplane, or point NODESHEPHERD_BIN_DIR at it", binDir, err)
		}
	}
	r := &runner{root: root, binDir: binDir, baselines: readBaselines(*flagBaseFile)}
	var results []result
	if baseline {
		results, err = r.baseline(chosen)
	} else {
		for _, m := range chosen {
			if interrupted.Err() != nil {
				break
			}
			res := r.mutant(m)
			progress("%s: %s", m.Name, describe(res))
			results = append(results, res)
		}
	}
	if err != nil {
		return err
	}
	table := markdown(results, baseline)
	fmt.Print(table)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		return err
	}
	progress("table written to %s", out)
	return nil
}

func describe(r result) string {
	switch r.Outcome {
	case "yes", "other-invariant":
		return fmt.Sprintf("caught (%s) by seed %d after %v: %s", r.Outcome, r.Seed, r.ToCatch.Round(time.Second), r.First)
	default:
		return r.Outcome + ": " + r.Why
	}
}

type runner struct {
	root, binDir string
	baselines    map[string]baselineRecord
}

// key names a seed's configuration in the baseline file.
func key(seed int64, d time.Duration, kinds []string, kindsUsed bool, config []string) string {
	k := "all"
	if kindsUsed && len(kinds) > 0 {
		k = strings.Join(kinds, ",")
	}
	out := fmt.Sprintf("seed=%d duration=%v kinds=%s", seed, d, k)
	if len(config) > 0 {
		out += " config=" + strings.Join(config, ",")
	}
	return out
}

// seedsOf are the seeds to run of m: -seeds when given.
func seedsOf(m *mutant) []int64 {
	if *flagSeeds == "" {
		return m.Seeds
	}
	var out []int64
	for _, s := range splitList(*flagSeeds) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "chaos-mutants: -seeds=%q: %q is not a whole number\n", *flagSeeds, s)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

// build is a tree built for seed runs: the race-enabled chaos test binary
// and the nodeshepherd binary the replicas run.
type build struct {
	dir, test, nodeshepherd string
	kinds                   bool // the test binary has -kinds
}

// prepare copies the working tree to a scratch directory, applies the
// patch (none: the unmutated tree) and builds there.
func (r *runner) prepare(name, patch string) (*build, error) {
	dir, err := os.MkdirTemp("", "chaos-mutant-"+name+"-")
	if err != nil {
		return nil, err
	}
	b := &build{dir: dir, test: filepath.Join(dir, "chaos.test"), nodeshepherd: filepath.Join(dir, "bin", "nodeshepherd")}
	progress("%s: copying the working tree to %s", name, dir)
	if err := copyTree(r.root, dir); err != nil {
		return b, fmt.Errorf("copying the tree: %w", err)
	}
	if patch != "" {
		if !filepath.IsAbs(patch) { // -dir may name a directory outside the tree
			patch = filepath.Join(r.root, patch)
		}
		cmd := exec.Command("git", "apply", "--whitespace=nowarn", patch)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("git apply %s: %v: %s (the mutant no longer applies: re-make it against the current tree)", patch, err, strings.TrimSpace(string(out)))
		}
	}
	progress("%s: building the race-enabled chaos test and nodeshepherd", name)
	start := time.Now()
	// -trimpath: the build cache then serves every package the patch did
	// not touch, whatever the scratch directory's name.
	cmd := exec.Command("go", "test", "-race", "-trimpath", "-c", "-o", b.test, "./test/chaos")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("building the chaos test: %v: %s", err, strings.TrimSpace(string(out)))
	}
	cmd = exec.Command("make", "-s", "build", "BIN="+filepath.Join(dir, "bin"))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("building nodeshepherd: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Whether TestChaos takes -kinds: its usage lists the flags.
	usage, _ := exec.Command(b.test, "-h").CombinedOutput()
	b.kinds = regexp.MustCompile(`(?m)^\s+-kinds\b`).Match(usage)
	progress("%s: built in %v (-kinds supported: %v)", name, time.Since(start).Round(time.Second), b.kinds)
	return b, nil
}

func (b *build) remove() {
	if b != nil && !*flagKeep {
		_ = os.RemoveAll(b.dir)
	}
}

// seedRun is one seed's outcome.
type seedRun struct {
	violations []string // "+12.3s INVARIANT object: detail"
	invariants []string
	other      string // a failure that is not a violation (setup, panic, ground truth)
	timedOut   bool
	log        string
}

var (
	// A violation, as TestChaos prints it: "  +12.345s 02:48:22.108 zone-rules node: ..."
	// (the offset, then chaos.Violation.String(): the clock time is optional,
	// as older checkers printed none).
	violationRE = regexp.MustCompile(`^\s+\+(-?[0-9][0-9.hmsµn]*) (?:[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} )?([a-z-]+) (.*)$`)
	failRE      = regexp.MustCompile(`^\s*--- FAIL: TestChaos/seed=`)
)

// runSeed runs TestChaos on one seed until done or until the deadline.
func (r *runner) runSeed(ctx context.Context, b *build, name string, seed int64, d time.Duration, kinds, config []string) seedRun {
	logDir := filepath.Join(*flagLogs, name)
	if !filepath.IsAbs(logDir) {
		logDir = filepath.Join(r.root, logDir) // relative to the repository, not the scratch copy
	}
	_ = os.MkdirAll(logDir, 0o755)
	logPath := filepath.Join(logDir, fmt.Sprintf("seed-%d.log", seed))
	sr := seedRun{log: logPath}
	logf, err := os.Create(logPath)
	if err != nil {
		sr.other = err.Error()
		return sr
	}
	defer logf.Close()
	// A test binary takes its own flags and the test's side by side (-args
	// is go test's).
	args := []string{"-test.run", "^TestChaos$", "-test.v", "-test.count=1", "-test.timeout=0",
		"-seed=" + strconv.FormatInt(seed, 10), "-duration=" + d.String(), "-out=" + filepath.Join(b.dir, "timelines")}
	if b.kinds && len(kinds) > 0 {
		args = append(args, "-kinds="+strings.Join(kinds, ","))
	}
	// A TestChaos without the flag refuses it ("flag provided but not
	// defined"): the mutant is then an error, not silently another run.
	for _, kv := range config {
		args = append(args, "-"+kv)
	}
	cmd := exec.Command(b.test, args...)
	cmd.Dir = filepath.Join(b.dir, "test", "chaos")
	cmd.Env = append(os.Environ(), "NODESHEPHERD_BIN_DIR="+r.binDir, "NODESHEPHERD_TEST_BINARY="+b.nodeshepherd)
	// Its own process group: the replicas it starts are in it too (the
	// control plane dies with it, Pdeathsig), so a deadline kills them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		sr.other = err.Error()
		return sr
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		sr.timedOut = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-done
	}
	_ = logf.Sync()
	data, _ := os.ReadFile(logPath)
	sr.violations, sr.invariants = parseViolations(string(data))
	if werr != nil && len(sr.violations) == 0 && !sr.timedOut {
		sr.other = fmt.Sprintf("%v; %s", werr, lastFailure(string(data)))
	}
	return sr
}

// parseViolations finds the violations in TestChaos's output.
func parseViolations(out string) (lines, invariants []string) {
	known := knownInvariants()
	for _, l := range strings.Split(out, "\n") {
		m := violationRE.FindStringSubmatch(l)
		if m == nil || !slices.Contains(known, m[2]) {
			continue
		}
		lines = append(lines, strings.TrimSpace(l))
		if !slices.Contains(invariants, m[2]) {
			invariants = append(invariants, m[2])
		}
	}
	return lines, invariants
}

// lastFailure is the first lines of the first failure in the output.
func lastFailure(out string) string {
	ls := strings.Split(out, "\n")
	for _, l := range ls {
		if strings.Contains(l, "_test.go:") && failureLine(l) || strings.HasPrefix(l, "flag provided but not defined") {
			return strings.TrimSpace(l)
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if failRE.MatchString(ls[i]) || strings.HasPrefix(ls[i], "panic:") {
			return strings.TrimSpace(ls[i])
		}
	}
	return "no failure message found"
}

func failureLine(l string) bool {
	for _, w := range []string{"ground truth", "exited with status", "Fatal", "failed", "error", "timed out", "not judged"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// mutant runs one mutant seed by seed until a violation or the budget.
func (r *runner) mutant(m *mutant) result {
	res := result{Mutant: m.Name, Expected: m.Invariant}
	if m.Pending != "" {
		res.Outcome, res.Pending, res.Why = "pending", m.Pending, "pending: "+m.Pending
		return res
	}
	b, err := r.prepare(m.Name, m.File)
	defer b.remove()
	if err != nil {
		res.Outcome, res.Why = "error", err.Error()
		return res
	}
	res.KindsUsed = b.kinds
	if !b.kinds && len(m.Kinds) > 0 {
		progress("%s: this TestChaos has no -kinds flag: its seeds draw every kind, not only %s", m.Name, strings.Join(m.Kinds, ","))
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(interrupted, *flagBudget)
	defer cancel()
	var others []string
	for _, seed := range seedsOf(m) {
		if ctx.Err() != nil {
			break
		}
		progress("%s: seed %d (duration %v, %v of the budget left)", m.Name, seed, m.Duration, (*flagBudget - time.Since(start)).Round(time.Second))
		sr := r.runSeed(ctx, b, m.Name, seed, m.Duration, m.Kinds, m.Config)
		res.SeedsRun = append(res.SeedsRun, seed)
		if len(sr.violations) > 0 {
			res.Seed, res.ToCatch, res.Invariants, res.First = seed, time.Since(start), sr.invariants, sr.violations[0]
			res.Outcome = "other-invariant"
			for _, inv := range m.Invariant {
				if slices.Contains(sr.invariants, inv) {
					res.Outcome = "yes"
				}
			}
			if bl, ok := r.baselines[key(seed, m.Duration, m.Kinds, b.kinds, m.Config)]; !ok {
				res.Baseline = "not run"
			} else if len(bl.Violations) > 0 {
				res.Baseline = fmt.Sprintf("FAILS TOO (%d violations: %s): this catch proves nothing", len(bl.Violations), bl.Violations[0])
			} else {
				res.Baseline = "0 violations"
			}
			return res
		}
		switch {
		case sr.timedOut:
			progress("%s: seed %d stopped at the budget (log %s)", m.Name, seed, sr.log)
		case sr.other != "" && strings.Contains(sr.other, "flag provided but not defined"):
			// The test binary refused its arguments: no seed will run.
			res.Outcome, res.Why = "error", fmt.Sprintf("seed %d: %s (log %s)", seed, sr.other, sr.log)
			return res
		case sr.other != "":
			progress("%s: seed %d failed without a violation: %s (log %s)", m.Name, seed, sr.other, sr.log)
			others = append(others, fmt.Sprintf("seed %d: %s", seed, sr.other))
		default:
			progress("%s: seed %d: no violation", m.Name, seed)
		}
	}
	res.Outcome = "no"
	res.Why = fmt.Sprintf("no violation in %v (seeds %s run)", time.Since(start).Round(time.Second), joinSeeds(res.SeedsRun))
	if len(others) > 0 {
		res.Why += "; " + strings.Join(others, "; ")
	}
	return res
}

// baseline runs every chosen mutant's seeds on the unmutated tree, each
// configuration once, and records the results.
func (r *runner) baseline(ms []*mutant) ([]result, error) {
	b, err := r.prepare("baseline", "")
	defer b.remove()
	if err != nil {
		return nil, err
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	var results []result
	done := map[string]bool{}
	for _, m := range ms {
		if m.Pending != "" || interrupted.Err() != nil {
			continue
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(interrupted, *flagBudget)
		res := result{Mutant: "baseline of " + m.Name, Expected: []string{"none"}, Outcome: "0 violations", KindsUsed: b.kinds}
		for _, seed := range seedsOf(m) {
			k := key(seed, m.Duration, m.Kinds, b.kinds, m.Config)
			if done[k] || ctx.Err() != nil {
				continue
			}
			done[k] = true
			progress("baseline: %s", k)
			// Logs by mutant: seeds of two configurations would overwrite each other.
			sr := r.runSeed(ctx, b, "baseline-"+m.Name, seed, m.Duration, m.Kinds, m.Config)
			res.SeedsRun = append(res.SeedsRun, seed)
			if sr.timedOut {
				break
			}
			if sr.other != "" {
				progress("baseline: %s failed without a violation: %s", k, sr.other)
				continue
			}
			r.baselines[k] = baselineRecord{Violations: sr.violations, At: time.Now().UTC(), Commit: strings.TrimSpace(string(commit))}
			if len(sr.violations) > 0 && res.Seed == 0 {
				res.Outcome, res.Seed, res.ToCatch, res.Invariants, res.First = "VIOLATIONS", seed, time.Since(start), sr.invariants, sr.violations[0]
			}
		}
		cancel()
		if len(res.SeedsRun) > 0 {
			results = append(results, res)
		}
		if err := writeBaselines(*flagBaseFile, r.baselines); err != nil {
			return results, err
		}
	}
	return results, nil
}

func joinSeeds(s []int64) string {
	var out []string
	for _, n := range s {
		out = append(out, strconv.FormatInt(n, 10))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

func readBaselines(path string) map[string]baselineRecord {
	m := map[string]baselineRecord{}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &m)
	}
	return m
}

func writeBaselines(path string, m map[string]baselineRecord) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// markdown is the results table.
func markdown(rs []result, baseline bool) string {
	var b strings.Builder
	if baseline {
		b.WriteString("| configuration | result | seeds run | seed | time | first violation |\n|---|---|---|---|---|---|\n")
		for _, r := range rs {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Mutant, r.Outcome, joinSeeds(r.SeedsRun), seedCell(r), timeCell(r), cell(r.First))
		}
		return b.String()
	}
	b.WriteString("| mutant | invariant expected | caught | seed | time to catch | first violation |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		caught := r.Outcome
		switch r.Outcome {
		case "other-invariant":
			caught = "other-invariant (" + strings.Join(r.Invariants, ", ") + ")"
		case "no", "error", "pending":
			caught += ": " + r.Why
		}
		if r.Baseline != "" {
			caught += "; baseline of the seed: " + r.Baseline
		}
		if !r.KindsUsed && r.Outcome != "pending" {
			caught += " (all kinds drawn: no -kinds)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Mutant, strings.Join(r.Expected, " or "), cell(caught), seedCell(r), timeCell(r), cell(r.First))
	}
	return b.String()
}

func seedCell(r result) string {
	if r.Seed == 0 && r.First == "" {
		return "-"
	}
	return strconv.FormatInt(r.Seed, 10)
}

func timeCell(r result) string {
	if r.ToCatch == 0 {
		return "-"
	}
	return r.ToCatch.Round(time.Second).String()
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository's root (git rev-parse --show-toplevel): %v", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies the working tree's files (tracked, and untracked ones
// not ignored: what `git ls-files -co --exclude-standard` lists, never bin/)
// from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-co", "--exclude-standard", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %v", err)
	}
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" || rel == "bin" || strings.HasPrefix(rel, "bin/") {
			continue
		}
		if err := copyFile(filepath.Join(root, rel), filepath.Join(dst, rel)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil // tracked, deleted in the working tree
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if !fi.Mode().IsRegular() {
		return nil // a submodule or the like
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
