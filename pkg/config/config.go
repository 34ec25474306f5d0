// Package config reads and prints nodeshepherd's configuration file (kind:
// NodeShepherdConfiguration). Every setting in it is a `nodeshepherd run`
// flag, grouped in sections and written in camelCase (node-monitor-period is
// nodeLifecycle.nodeMonitorGracePeriod): the flags stay the single place where
// settings, defaults and help are declared, and the controllers' Validate
// the single place where they are checked. Flags given on the command line
// override the file. A scenario's controllers: block (pkg/simulate) is read by
// the same Read, with the controllers' sections only.
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

// Key turns a flag name into its key in the file: node-monitor-grace-period
// is nodeMonitorGracePeriod.
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

// Assignment is one setting read from a document: the flag it sets, its
// values (several for a list) and where it was written.
type Assignment struct {
	Flag   string
	Key    string // section.key, as written
	Values []string
	Line   int
}

// Apply reads the file at path and sets every flag it names on fs, except
// those already set on the command line. Every problem is reported with
// file:line; on any error no flag is changed. newSections returns sections
// bound to scratch storage: registering flags resets what they are bound to.
func Apply(path string, fs *pflag.FlagSet, newSections func() []Section) error {
	root, err := readDocument(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	sets, err := Read(path, root, "", newSections(), "apiVersion", "kind")
	if err == nil {
		err = Check(path, sets, newSections())
	}
	if err == nil {
		err = Set(path, sets, fs)
	}
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	return nil
}

// readDocument parses the file and checks its apiVersion and kind.
func readDocument(path string) (*yaml.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: expected a %s document", path, Kind)
	}
	root := doc.Content[0]
	var head configfile.TypeMeta
	_ = root.Decode(&head)
	if head.APIVersion != configfile.APIVersion || head.Kind != Kind {
		return nil, fmt.Errorf("%s:1: expected apiVersion: %s and kind: %s, got apiVersion: %q, kind: %q",
			path, configfile.APIVersion, Kind, head.APIVersion, head.Kind)
	}
	return root, nil
}

// reader collects the assignments of one document and its problems.
type reader struct {
	path     string
	prefix   string // where the sections sit, e.g. "controllers." in a scenario
	sections []Section
	flags    [][]string // each section's flags, in registration order
	sets     []Assignment
	errs     []error
}

func (r *reader) bad(n *yaml.Node, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s:%d: %s", r.path, n.Line, fmt.Sprintf(format, args...)))
}

// Read reads a mapping of sections to settings (a configuration file's
// root, or a scenario's controllers: block; prefix is then "controllers.")
// into assignments. Keys in reserved are skipped. Unknown sections and
// settings, settings in the wrong section, flag names written as keys (the
// old scenario spelling) and malformed values are errors at their line that
// say what to write instead.
func Read(path string, n *yaml.Node, prefix string, sections []Section, reserved ...string) ([]Assignment, error) {
	r := &reader{path: path, prefix: prefix, sections: sections}
	for _, s := range sections {
		r.flags = append(r.flags, s.names())
	}
	if n.Kind != yaml.MappingNode {
		where := ""
		if prefix != "" {
			where = strings.TrimSuffix(prefix, ".") + ": "
		}
		r.bad(n, "%sexpected a mapping of sections (%s) to settings", where, strings.Join(r.sectionNames(), ", "))
		return nil, errors.Join(r.errs...)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case slices.Contains(reserved, k.Value):
		case seen[k.Value]:
			r.bad(k, "%s%s is given twice", prefix, k.Value)
		default:
			seen[k.Value] = true
			r.section(k, v)
		}
	}
	return r.sets, errors.Join(r.errs...)
}

func (r *reader) sectionNames() []string {
	var out []string
	for _, s := range r.sections {
		out = append(out, s.Name)
	}
	return out
}

// find returns the section that registers flag, or -1.
func (r *reader) find(flag string) int {
	for i, names := range r.flags {
		if slices.Contains(names, flag) {
			return i
		}
	}
	return -1
}

// section reads one section's settings.
func (r *reader) section(k, v *yaml.Node) {
	idx := slices.Index(r.sectionNames(), k.Value)
	if idx < 0 {
		r.unknownSection(k)
		return
	}
	if v.Kind != yaml.MappingNode {
		r.bad(v, "%s%s: expected a mapping of settings", r.prefix, k.Value)
		return
	}
	keys := map[string]bool{}
	for j := 0; j+1 < len(v.Content); j += 2 {
		sk, sv := v.Content[j], v.Content[j+1]
		if keys[sk.Value] {
			r.bad(sk, "%s%s.%s is given twice", r.prefix, k.Value, sk.Value)
			continue
		}
		keys[sk.Value] = true
		if flag, ok := r.setting(idx, k.Value, sk); ok {
			r.value(flag, k.Value+"."+sk.Value, sk, sv)
		}
	}
}

// unknownSection explains a key that is not a section: a setting written
// without its section (as scenarios used to, by flag name) or a typo.
func (r *reader) unknownSection(k *yaml.Node) {
	flag := strings.TrimPrefix(k.Value, "--")
	if !strings.Contains(flag, "-") {
		flag = flagName(flag)
	}
	if i := r.find(flag); i >= 0 {
		what := "is a setting, not a section"
		if strings.Contains(k.Value, "-") {
			what = "is the old spelling"
		}
		r.bad(k, "%s%s %s; write %s.%s", r.prefix, k.Value, what, r.sections[i].Name, Key(flag))
		return
	}
	r.bad(k, "unknown section %q; sections: %s", r.prefix+k.Value, strings.Join(r.sectionNames(), ", "))
}

// setting maps a key of section idx to its flag, or explains why it cannot.
func (r *reader) setting(idx int, section string, sk *yaml.Node) (string, bool) {
	name := flagName(sk.Value)
	if strings.Contains(sk.Value, "-") {
		name = strings.TrimPrefix(sk.Value, "--")
	}
	i := r.find(name)
	switch {
	case i < 0:
		var valid []string
		for _, n := range r.flags[idx] {
			valid = append(valid, Key(n))
		}
		r.bad(sk, "unknown setting %s%s.%s; the section's settings: %s (see nodeshepherd config default)", r.prefix, section, sk.Value, strings.Join(valid, ", "))
	case strings.Contains(sk.Value, "-"):
		r.bad(sk, "%s%s.%s is the old spelling; write %s.%s", r.prefix, section, sk.Value, r.sections[i].Name, Key(name))
	case i != idx:
		r.bad(sk, "unknown setting %s%s.%s; it belongs to section %s: write %s.%s", r.prefix, section, sk.Value, r.sections[i].Name, r.sections[i].Name, sk.Value)
	default:
		return name, true
	}
	return "", false
}

// value records a scalar or a list of scalars for flag.
func (r *reader) value(flag, key string, sk, sv *yaml.Node) {
	a := Assignment{Flag: flag, Key: r.prefix + key, Line: sk.Line}
	switch sv.Kind {
	case yaml.ScalarNode:
		a.Values = []string{sv.Value}
	case yaml.SequenceNode:
		for _, it := range sv.Content {
			if it.Kind != yaml.ScalarNode {
				r.bad(it, "%s: list items must be plain values", a.Key)
				return
			}
			a.Values = append(a.Values, it.Value)
		}
	default:
		r.bad(sv, "%s: expected a value or a list", a.Key)
		return
	}
	r.sets = append(r.sets, a)
}

// Check sets every assignment on a scratch flag set bound to sections (fresh
// storage), so that bad values are found before anything is applied.
func Check(path string, sets []Assignment, sections []Section) error {
	scratch := pflag.NewFlagSet("check", pflag.ContinueOnError)
	for _, s := range sections {
		s.Register(scratch)
	}
	var errs []error
	for _, a := range sets {
		f := scratch.Lookup(a.Flag)
		if len(a.Values) != 1 && !isSlice(f) {
			errs = append(errs, fmt.Errorf("%s:%d: %s takes one value, got a list", path, a.Line, a.Key))
			continue
		}
		for _, val := range a.Values {
			if err := scratch.Set(a.Flag, val); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %v", path, a.Line, a.Key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Set applies checked assignments to fs; flags already set on the command
// line win. A list replaces the flag's default rather than adding to it.
func Set(path string, sets []Assignment, fs *pflag.FlagSet) error {
	for _, a := range sets {
		f := fs.Lookup(a.Flag)
		if f == nil || f.Changed {
			continue
		}
		var err error
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			err = sv.Replace(a.Values)
		} else {
			err = f.Value.Set(a.Values[0])
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %s: %v", path, a.Line, a.Key, err)
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
	b.WriteString("# Every setting is a `nodeshepherd run` flag in camelCase (nodeLifecycle.nodeMonitorGracePeriod\n")
	b.WriteString("# is --node-monitor-grace-period); flags given on the command line override this file.\n")
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\n", configfile.APIVersion, Kind)
	for _, s := range sections {
		fs := pflag.NewFlagSet(s.Name, pflag.ContinueOnError)
		fs.SortFlags = false
		s.Register(fs)
		fmt.Fprintf(&b, "\n# %s\n%s:\n", s.Help, s.Name)
		var err error
		fs.VisitAll(func(f *pflag.Flag) { err = errors.Join(err, writeSetting(&b, f)) })
		if err != nil {
			return err
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeSetting writes one flag as a commented key: strings and durations
// stay strings; numbers and booleans are YAML scalars of their kind; lists
// are lists.
func writeSetting(b *bytes.Buffer, f *pflag.Flag) error {
	for _, line := range wrap(f.Usage, 96) {
		fmt.Fprintf(b, "  # %s\n", line)
	}
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
	if err := enc.Encode(map[string]any{Key(f.Name): val}); err != nil {
		return err
	}
	text := strings.TrimRight(out.String(), "\n")
	b.WriteString("  " + strings.ReplaceAll(text, "\n", "\n  ") + "\n")
	return nil
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
