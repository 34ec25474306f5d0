// Package explain reads a cluster with the user's credentials and says what
// nodeshepherd sees about a node or a Pending pod, and why. It never writes:
// an operator can run it at any time, against any replica's view, without a
// leader.
package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"sigs.k8s.io/yaml"
)

// Formats lists the values of -o, as kubectl names them; "" is the table.
var Formats = []string{"table", "json", "yaml"}

// Tabler is an explanation that prints itself as a table for people; json
// and yaml come from its exported fields.
type Tabler interface {
	WriteTable(w io.Writer) error
}

// ValidFormat reports whether -o names a known format.
func ValidFormat(format string) bool {
	if format == "" {
		return true
	}
	for _, f := range Formats {
		if f == format {
			return true
		}
	}
	return false
}

// Write prints v in the format of -o.
func Write(w io.Writer, format string, v Tabler) error {
	switch format {
	case "", "table":
		return v.WriteTable(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q (want one of table, json, yaml)", format)
}

// stamp prints a time for the tables: RFC 3339 in UTC, as kubectl prints
// them, and "-" for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
