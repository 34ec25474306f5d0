//go:build !linux

package childproc

import "os/exec"

// No kernel here kills a child with its parent: it is left running, and the
// caller's cleanup is all there is.
func dieWithParent(*exec.Cmd) {}
