// Package childproc ties the processes nodeshepherd and its tests start to
// the life of the process that starts them.
package childproc

import "os/exec"

// DieWithParent has the kernel send SIGKILL to cmd's process when the
// process that started it dies, on Linux (Pdeathsig); elsewhere it does
// nothing. A parent killed outright (a test binary at its -timeout, a
// `nodeshepherd simulate` under SIGKILL) runs no cleanup, and an etcd, an API
// server or a `nodeshepherd run` left behind eats CPU in the next run. Call
// it before cmd.Start; it keeps any other SysProcAttr setting.
//
// The signal follows the OS thread that started cmd, not the whole process;
// Go ends a thread only when a goroutine locked to it exits, which the
// callers here never do.
func DieWithParent(cmd *exec.Cmd) { dieWithParent(cmd) }
