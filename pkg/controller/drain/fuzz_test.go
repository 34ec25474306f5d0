package drain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadRules: any --drain-rules file loads or is refused with an error
// naming the flag and the file, never a panic; a file that loads has at
// least one condition and a selector.
func FuzzLoadRules(f *testing.F) {
	head := "apiVersion: nodeshepherd.io/v1alpha1\nkind: DrainRules\n"
	for _, s := range []string{
		head + "conditions:\n- KernelDeadlock=True,10m\n- {type: Ready, status: Unknown, minDuration: 30m}\nnodeSelector: pool in (batch)\n",
		head + "conditions: [KernelDeadlock]\nnodeExpression: '!has(node.metadata.labels.critical)'\nwindows: ['Mon-Fri 22:00-06:00']\ntimeZone: Europe/Paris\n",
		head + "conditions:\n- {type: MemoryPressure, forceAfter: 2h}\n",
		head + "conditions: [{type: X, minDuration: [1]}]\n",
		head + "conditions: [KernelDeadlock]\nwindows: [{a: b}]\n",
		head + "timeZone: UTC\n",
		head,
		"kind: DrainRules\n",
		"",
		"{",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := LoadRules(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--drain-rules: ") || !strings.Contains(err.Error(), "rules.yaml") {
				t.Errorf("error %q does not name --drain-rules and the file", err)
			}
			return
		}
		if len(r.Conditions) == 0 || r.Selector == nil {
			t.Errorf("loaded rules without conditions or selector: %+v", r)
		}
	})
}
