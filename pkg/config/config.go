// Package config reads and prints nodeshepherd's configuration file (kind:
// NodeShepherdConfiguration). Every setting in it is a `nodeshepherd run`
// flag, grouped in sections and written in camelCase (node-monitor-period is
// nodeLifecycle.nodeMonitorPeriod): the flags stay the single place where
// settings, defaults and help are declared, and the controllers' Validate
// the single place where they are checked. Flags given on the command line
// override the file.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
)

// Kind is the kind of the configuration file.
const Kind = "NodeShepherdConfiguration"

// Section is a group of flags, registered by Register on a flag set.
type Section struct {
	Name     string
	Help     string
	Register func(fs *pflag.FlagSet)
}

// Key turns a flag name into its key in the file: node-monitor-period is
// nodeMonitorPeriod.
func Key(flag string) string {
	parts := strings.Split(flag, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// flagName turns a key back into the flag name.
func flagName(key string) string {
	var b strings.Builder
	for _, r := range key {
		if unicode.IsUpper(r) {
			b.WriteByte('-')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// names returns the flags a section registers, in registration order.
func (s Section) names() []string {
	fs := pflag.NewFlagSet(s.Name, pflag.ContinueOnError)
	fs.SortFlags = false
	s.Register(fs)
	var out []string
	fs.VisitAll(func(f *pflag.Flag) { out = append(out, f.Name) })
	return out
}

// Apply reads the file at path and sets every flag it names on fs, except
// those already set on the command line. Every problem is reported with
// file:line; on any error no flag is changed. newSections returns sections
// bound to scratch storage: registering flags resets what they are bound to.
func Apply(path string, fs *pflag.FlagSet, newSections func() []Section) error {
	sections := newSections()
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("--config: %s: %w", path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("--config: %s: expected a %s document", path, Kind)
	}
	root := doc.Content[0]
	var head configfile.TypeMeta
	_ = root.Decode(&head)
	if head.APIVersion != configfile.APIVersion || head.Kind != Kind {
		return fmt.Errorf("--config: %s:1: expected apiVersion: %s and kind: %s, got apiVersion: %q, kind: %q",
			path, configfile.APIVersion, Kind, head.APIVersion, head.Kind)
	}
	type assignment struct {
		flag   string
		values []string
		line   int
	}
	var sets []assignment
	var errs []error
	bad := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", path, n.Line, fmt.Sprintf(format, args...)))
	}
	var sectionNames []string
	for _, s := range sections {
		sectionNames = append(sectionNames, s.Name)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "apiVersion" || k.Value == "kind" {
			continue
		}
		if seen[k.Value] {
			bad(k, "%s is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		idx := slices.Index(sectionNames, k.Value)
		if idx < 0 {
			bad(k, "unknown section %q; sections: %s", k.Value, strings.Join(sectionNames, ", "))
			continue
		}
		if v.Kind != yaml.MappingNode {
			bad(v, "%s: expected a mapping of settings", k.Value)
			continue
		}
		known := sections[idx].names()
		keys := map[string]bool{}
		for j := 0; j+1 < len(v.Content); j += 2 {
			sk, sv := v.Content[j], v.Content[j+1]
			name := flagName(sk.Value)
			switch {
			case keys[sk.Value]:
				bad(sk, "%s.%s is given twice", k.Value, sk.Value)
				continue
			case !slices.Contains(known, name):
				var valid []string
				for _, n := range known {
					valid = append(valid, Key(n))
				}
				bad(sk, "unknown setting %s.%s; the section's settings: %s (see nodeshepherd config default)", k.Value, sk.Value, strings.Join(valid, ", "))
				continue
			}
			keys[sk.Value] = true
			a := assignment{flag: name, line: sk.Line}
			switch sv.Kind {
			case yaml.ScalarNode:
				a.values = []string{sv.Value}
			case yaml.SequenceNode:
				for _, it := range sv.Content {
					if it.Kind != yaml.ScalarNode {
						bad(it, "%s.%s: list items must be plain values", k.Value, sk.Value)
					}
					a.values = append(a.values, it.Value)
				}
			default:
				bad(sv, "%s.%s: expected a value or a list", k.Value, sk.Value)
			}
			sets = append(sets, a)
		}
	}
	// Check every value on a scratch copy first, so that nothing is half-applied.
	scratch := pflag.NewFlagSet("check", pflag.ContinueOnError)
	for _, s := range newSections() {
		s.Register(scratch)
	}
	for _, a := range sets {
		f := scratch.Lookup(a.flag)
		isList := isSlice(f)
		if len(a.values) != 1 && !isList {
			errs = append(errs, fmt.Errorf("%s:%d: %s takes one value, got a list", path, a.line, Key(a.flag)))
			continue
		}
		for _, val := range a.values {
			if err := scratch.Set(a.flag, val); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %v", path, a.line, Key(a.flag), err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("--config: %w", errors.Join(errs...))
	}
	for _, a := range sets {
		f := fs.Lookup(a.flag)
		if f == nil || f.Changed {
			continue // the command line wins
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if err := sv.Replace(a.values); err != nil {
				return fmt.Errorf("--config: %s:%d: %s: %v", path, a.line, Key(a.flag), err)
			}
			continue
		}
		if err := f.Value.Set(a.values[0]); err != nil {
			return fmt.Errorf("--config: %s:%d: %s: %v", path, a.line, Key(a.flag), err)
		}
	}
	return nil
}

func isSlice(f *pflag.Flag) bool {
	_, ok := f.Value.(pflag.SliceValue)
	return ok
}

// WriteDefault prints a complete configuration with every setting at its
// default and its help as a comment.
func WriteDefault(w io.Writer, sections []Section) error {
	var b bytes.Buffer
	b.WriteString("# nodeshepherd configuration: nodeshepherd run --config FILE\n")
	b.WriteString("# Every setting is a `nodeshepherd run` flag in camelCase (nodeLifecycle.nodeMonitorPeriod is\n")
	b.WriteString("# --node-monitor-period); flags given on the command line override this file.\n")
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\n", configfile.APIVersion, Kind)
	for _, s := range sections {
		fs := pflag.NewFlagSet(s.Name, pflag.ContinueOnError)
		fs.SortFlags = false
		s.Register(fs)
		fmt.Fprintf(&b, "\n# %s\n%s:\n", s.Help, s.Name)
		var err error
		fs.VisitAll(func(f *pflag.Flag) {
			for _, line := range wrap(f.Usage, 96) {
				fmt.Fprintf(&b, "  # %s\n", line)
			}
			// Strings and durations stay strings; numbers and booleans are
			// written as YAML scalars of their kind; lists as lists.
			var val any = f.Value.String()
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				val = append([]string{}, sv.GetSlice()...)
			} else if t := f.Value.Type(); t != "string" && t != "duration" {
				var n yaml.Node
				if e := yaml.Unmarshal([]byte(f.Value.String()), &n); e == nil && len(n.Content) == 1 {
					val = n.Content[0]
				}
			}
			var out bytes.Buffer
			enc := yaml.NewEncoder(&out)
			enc.SetIndent(2)
			if e := enc.Encode(map[string]any{Key(f.Name): val}); e != nil {
				err = e
			}
			s := strings.TrimRight(out.String(), "\n")
			b.WriteString("  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n")
		})
		if err != nil {
			return err
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// wrap splits text into lines of at most width characters.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
