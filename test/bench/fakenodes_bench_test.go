// Package bench holds benchmarks that run against the local control plane.
// They report figures for docs/benchmarks.md; tests assert behaviour elsewhere.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// BenchmarkFakeNodes runs `nodeshepherd fakenodes` as its own process with
// BENCH_NODES (5000) nodes at the kubelet's default 10s lease renewal against
// the local control plane, and reports that process's CPU and peak RSS over a
// steady-state window of BENCH_WINDOW (1m).
func BenchmarkFakeNodes(b *testing.B) {
	nodes := benchenv.Int(b, "BENCH_NODES", 5000)
	window := benchenv.Duration(b, "BENCH_WINDOW", time.Minute)
	cp := framework.StartControlPlane(b, controlplane.Config{})
	client := framework.Client(b, cp)
	bin := filepath.Join(b.TempDir(), "nodeshepherd")
	if out, err := framework.Command("go", "build", "-o", bin, "github.com/nodeshepherd/nodeshepherd/cmd/nodeshepherd").CombinedOutput(); err != nil {
		b.Fatalf("building nodeshepherd: %s", out)
	}
	for i := 0; i < b.N; i++ {
		cmd := framework.Command(bin, "fakenodes", "--kubeconfig", cp.KubeconfigPath(), "--nodes", strconv.Itoa(nodes),
			"--name-prefix", fmt.Sprintf("bench-%d-", i), "--control-socket", filepath.Join(b.TempDir(), "fn.sock"))
		logf, err := os.Create(filepath.Join(b.TempDir(), "fakenodes.log"))
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		pid := cmd.Process.Pid
		framework.Eventually(b, 10*time.Minute, "fake nodes running", func(context.Context) (bool, string, error) {
			data, _ := os.ReadFile(logf.Name())
			return strings.Contains(string(data), "Fake nodes running"), lastLine(data), nil
		})
		registered := time.Since(start)
		// Let the first round of renewals spread out before measuring.
		time.Sleep(15 * time.Second)
		cpu0 := cpuSeconds(b, pid)
		t0 := time.Now()
		time.Sleep(window)
		cpu := cpuSeconds(b, pid) - cpu0
		elapsed := time.Since(t0)
		rssMB := peakRSSMB(b, pid)

		ctx := framework.Context(b)
		leases, err := client.CoordinationV1().Leases("kube-node-lease").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			b.Fatal(err)
		}
		fresh := 0
		for _, l := range leases.Items {
			if l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < 15*time.Second {
				fresh++
			}
		}
		cores := cpu / elapsed.Seconds()
		b.ReportMetric(cores, "cpu-cores")
		b.ReportMetric(cpu/elapsed.Minutes(), "cpu-s/min")
		b.ReportMetric(rssMB, "peak-rss-MB")
		b.ReportMetric(float64(fresh)/float64(nodes), "fresh-lease-fraction")
		b.ReportMetric(registered.Seconds(), "s-to-register")
		b.Logf("%d fake nodes: registered in %s; over %s: %.2f CPU cores (%.1f CPU-s/min), peak RSS %.0f MB, %d/%d leases renewed in the last 15s",
			nodes, registered.Round(time.Second), elapsed.Round(time.Second), cores, cpu/elapsed.Minutes(), rssMB, fresh, nodes)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// cpuSeconds reads user+system CPU time of a process from /proc.
func cpuSeconds(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the parenthesised command name; utime and stime are 14 and 15.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ is 100 on Linux
}

// peakRSSMB reads VmHWM, the peak resident set, of a process.
func peakRSSMB(b *testing.B, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	b.Fatal("VmHWM not found")
	return 0
}
