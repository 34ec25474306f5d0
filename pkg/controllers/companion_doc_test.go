package controllers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCompanionTableIsTheRegistrys: docs/companion.md's "What runs where"
// table has one row per controller of the registry, whose answer (yes / no)
// is its descriptor's Companion: a controller added to the registry, or
// changed, fails here until the table says so (prose elsewhere is not
// checked; this table is the one operators decide by).
func TestCompanionTableIsTheRegistrys(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "companion.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z]+)` \\| (yes|no)\\b")
	rows := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			if _, dup := rows[m[1]]; dup {
				t.Errorf("%s: two rows for %s", path, m[1])
			}
			rows[m[1]] = m[2]
		}
	}
	for _, d := range Registry() {
		want := "no"
		if d.Companion {
			want = "yes"
		}
		got, ok := rows[d.Name]
		switch {
		case !ok:
			t.Errorf("%s: no row for controller %s (its descriptor says companion: %s)", path, d.Name, want)
		case got != want:
			t.Errorf("%s: %s's row says %q, its descriptor's Companion says %q", path, d.Name, got, want)
		}
		delete(rows, d.Name)
	}
	for name := range rows {
		t.Errorf("%s: a row for %s, which the registry does not list", path, name)
	}
}
