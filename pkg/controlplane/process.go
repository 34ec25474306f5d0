package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/childproc"
)

// process is one running component. Each runs in its own process group and
// is sent SIGKILL by the kernel if nodeshepherd dies first (Pdeathsig), so a
// failing or killed test never leaves orphans behind.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // valid after done is closed
}

func startProcess(name, binary string, args, env []string, logDir string) (*process, error) {
	return startProcessLog(name, binary, args, env, logDir, false)
}

// startProcessLog starts a component, its log in logDir/NAME.log, appended
// to rather than replaced when appendLog (a restarted component); env is
// added to this process's environment.
func startProcessLog(name, binary string, args, env []string, logDir string, appendLog bool) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logFile, err := os.OpenFile(logPath, flags, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after the grace period.
func (p *process) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// exitError describes an unexpected exit with the end of the component's log.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited during start-up (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// waitFor polls check until it succeeds, the process exits, or the context ends.
func waitFor(ctx context.Context, p *process, what string, check func(context.Context) error) error {
	var last error
	for {
		if p.exited() {
			return p.exitError()
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s not ready in time (last check: %v); see %s:\n%s", what, last, p.logPath, tail(p.logPath, 10))
			}
			return ctx.Err()
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}
