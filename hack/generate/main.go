// Command generate writes the files pkg/generate computes from the
// controllers' descriptors (`make generate`, from the module root).
package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/nodeshepherd/nodeshepherd/pkg/generate"
)

func main() {
	files, err := generate.Files(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		old, _ := os.ReadFile(path)
		if string(old) == string(files[path]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "generate:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, files[path], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "generate:", err)
			os.Exit(1)
		}
		fmt.Println("generate: wrote", path)
	}
}
