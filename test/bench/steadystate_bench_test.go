package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// BenchmarkSteadyStateCPU runs kube-controller-manager with only its
// nodelifecycle controller and `nodeshepherd run --controllers=nodelifecycle`
// side by side against the same BENCH_NODES (5000) fake nodes with kubelet
// timings, and reports each process's CPU over BENCH_WINDOW (1m) once every
// node is Ready. Neither writes anything in steady state, so both can run at
// once and see exactly the same load.
func BenchmarkSteadyStateCPU(b *testing.B) {
	nodes := benchenv.Int(b, "BENCH_NODES", 5000)
	window := benchenv.Duration(b, "BENCH_WINDOW", time.Minute)
	cp := framework.StartControlPlane(b, controlplane.Config{ControllerManager: true, Controllers: "nodelifecycle"})
	client := framework.Client(b, cp)
	for i := 0; i < b.N; i++ {
		framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: nodes, NamePrefix: fmt.Sprintf("steady-%d-", i)})
		ns := framework.StartBinary(b, "run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=nodelifecycle",
			"--leader-elect=false", "--metrics-bind-address=0")
		framework.WaitAllNodesReady(b, client, nodes, 10*time.Minute)
		kcm := cp.PID(controlplane.ControllerManager)
		pids := map[string]int{"kube-controller-manager": kcm, "nodeshepherd": ns.Process.Pid}
		before := map[string]float64{}
		for k, pid := range pids {
			before[k] = cpuSeconds(b, pid)
		}
		start := time.Now()
		time.Sleep(window)
		elapsed := time.Since(start)
		var line []string
		for _, k := range []string{"kube-controller-manager", "nodeshepherd"} {
			cores := (cpuSeconds(b, pids[k]) - before[k]) / elapsed.Seconds()
			b.ReportMetric(cores, k+"-cores")
			b.ReportMetric(peakRSSMB(b, pids[k]), k+"-peak-rss-MB")
			line = append(line, fmt.Sprintf("%s %.3f cores", k, cores))
		}
		fmt.Printf("    %d nodes, %s window: %s\n", nodes, elapsed.Round(time.Second), strings.Join(line, ", "))
	}
}
