package controlplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Control planes listen on ports chosen here and bound by their components
// a moment later. Two things could take such a port in between:
//   - an outgoing connection: the kernel picks its local port from the
//     ephemeral range (ip_local_port_range), so listening ports are chosen
//     below it, where no outgoing connection ever lands;
//   - another control plane starting at the same time, in this process or
//     another (test binaries run side by side): startPortLock serialises
//     the window from choosing the ports to the components having bound them.

// portsFloor is the lowest port chosen; below it sit well-known services.
const portsFloor = 20000

// ephemeralLow reads the start of the kernel's ephemeral port range
// (32768 when it cannot be read).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				return v
			}
		}
	}
	return 32768
}

// freePorts returns n distinct loopback ports, free now, outside the
// ephemeral range. They are held open together so that none is returned
// twice; the caller binds them while holding startPortLock.
func freePorts(n int) ([]int, error) {
	low, high := portsFloor, ephemeralLow()
	if high-low < 10*n {
		return kernelPorts(n) // a machine with an unusual range
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("finding %d free ports in %d-%d: too many taken", n, low, high-1)
		}
		p := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// kernelPorts asks the kernel for n free ports (from the ephemeral range).
func kernelPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portLockFile is the machine-wide lock of startPortLock.
var portLockFile = filepath.Join(os.TempDir(), "nodeshepherd-controlplane-ports.lock")

// startPortLock takes a machine-wide lock (a flock on portLockFile) for the
// time between choosing ports and the components listening on them; unlock
// releases it.
func startPortLock() (unlock func(), err error) { return lockFile(portLockFile) }

func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("port lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("port lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
