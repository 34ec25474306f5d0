// Package configfile reads nodeshepherd's versioned YAML files strictly:
// unknown fields, wrong types and bad values are errors that name the file
// and line, so that a typo never silently becomes a default.
package configfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// APIVersion is the version every nodeshepherd file carries.
const APIVersion = "nodeshepherd.io/v1alpha1"

// TypeMeta is the header of a versioned file.
type TypeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

// LineError is an error at a line of a YAML document; Decode turns it into
// "file:line: message". Custom unmarshalers return it.
func LineError(node *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", node.Line, fmt.Sprintf(format, args...))
}

var linePrefix = regexp.MustCompile(`^line (\d+): `)

// Load reads path into out (a pointer to a struct with yaml tags whose first
// fields are an inline TypeMeta) and checks apiVersion and kind.
func Load(path, kind string, out any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return Decode(path, data, kind, out)
}

// Decode is Load on bytes already read; name is used in messages.
func Decode(name string, data []byte, kind string, out any) error {
	var meta TypeMeta
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return locate(name, err)
	}
	if meta.APIVersion != APIVersion || meta.Kind != kind {
		return fmt.Errorf("%s:1: expected apiVersion: %s and kind: %s, got apiVersion: %q, kind: %q",
			name, APIVersion, kind, meta.APIVersion, meta.Kind)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: the file is empty", name)
		}
		return locate(name, err)
	}
	return nil
}

// locate rewrites yaml's "line N: msg" errors (one per problem) as
// "name:N: msg".
func locate(name string, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []error
	for _, m := range msgs {
		m = strings.TrimPrefix(m, "yaml: ")
		if loc := linePrefix.FindStringSubmatch(m); loc != nil {
			out = append(out, fmt.Errorf("%s:%s: %s", name, loc[1], strings.TrimPrefix(m, loc[0])))
		} else {
			out = append(out, fmt.Errorf("%s: %s", name, m))
		}
	}
	return errors.Join(out...)
}

// DecodeStrict decodes a node inside a custom unmarshaler, where yaml does
// not carry the decoder's KnownFields setting: unknown keys of a mapping
// into a struct are errors at their line.
func DecodeStrict(node *yaml.Node, out any) error {
	if node.Kind == yaml.MappingNode {
		var known []string
		t := reflect.TypeOf(out).Elem()
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			known = append(known, name)
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			if k := node.Content[i]; !slices.Contains(known, k.Value) {
				return LineError(k, "field %s not found (known fields: %s)", k.Value, strings.Join(known, ", "))
			}
		}
	}
	return node.Decode(out)
}
