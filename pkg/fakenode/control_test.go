package fakenode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestControlSocketDirectoryIsPrivate: the socket's directory is created
// 0700, and an existing directory open to others is refused.
func TestControlSocketDirectoryIsPrivate(t *testing.T) {
	base := t.TempDir()
	socket := filepath.Join(base, "new", "fakenodes.sock")
	if err := privateDir(socket); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(socket))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("created with mode %v, want 0700", fi.Mode().Perm())
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	err = privateDir(filepath.Join(open, "fakenodes.sock"))
	if err == nil || !strings.Contains(err.Error(), "is open to other users") {
		t.Errorf("error %v, want a refusal of the open directory", err)
	}
	if d := filepath.Dir(DefaultControlSocket()); !strings.Contains(filepath.Base(d), "nodeshepherd-") {
		t.Errorf("default socket %s is not in its own directory", DefaultControlSocket())
	}
}
