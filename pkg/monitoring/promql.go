// Package monitoring reads the dashboard and alerting rules shipped in
// deploy/monitoring: MetricNames finds the metrics a PromQL expression
// selects, so that a test can check each against what nodeshepherd exports.
//
// It is a tokenizer, not a parser: github.com/prometheus/prometheus (whose
// parser this would otherwise use) pulls in hundreds of modules. It knows
// PromQL's lexical rules (strings, comments, label matchers, ranges, grouping
// label lists, keywords, function calls) and Grafana's variables ($var,
// ${var}, $__rate_interval), which is all it takes to tell a metric name from
// the other identifiers.
package monitoring

import (
	"fmt"
	"strings"
)

// aggregations are PromQL's aggregation operators: followed by "(" or by a
// grouping clause, never metric names.
var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// keywords are PromQL's other reserved words.
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "atan2": true, "inf": true, "nan": true,
	"offset": true, "start": true, "end": true, "smoothed": true, "anchored": true,
}

// groupings take a parenthesised list of label names.
var groupings = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// MetricNames returns the names of the metrics expr selects, once each, in
// order of first appearance. An expression it cannot read (an unterminated
// string, unbalanced brackets, a regular expression on __name__) is an error
// that gives the offset.
func MetricNames(expr string) ([]string, error) {
	l := lexer{s: expr, seen: map[string]bool{}, pending: -1}
	if err := l.run(); err != nil {
		return nil, err
	}
	return l.names, nil
}

type lexer struct {
	s     string
	i     int
	names []string
	seen  map[string]bool
	// sels are the selectors in order, and pending the index of the one
	// whose {...} comes next (-1: none).
	sels    []Selector
	pending int
}

// Selector is one place an expression selects a metric: its name and the
// labels its matchers constrain (a Grafana variable in the braces counts
// as no label).
type Selector struct {
	Name   string
	Labels []string
}

// Has reports whether the selector constrains label.
func (s Selector) Has(label string) bool {
	for _, l := range s.Labels {
		if l == label {
			return true
		}
	}
	return false
}

// Selectors returns every metric selector of expr, in order, one per
// occurrence: a test can then require a label (job) on each.
func Selectors(expr string) ([]Selector, error) {
	l := lexer{s: expr, seen: map[string]bool{}, pending: -1}
	if err := l.run(); err != nil {
		return nil, err
	}
	return l.sels, nil
}

func (l *lexer) add(name string) {
	if !l.seen[name] {
		l.seen[name] = true
		l.names = append(l.names, name)
	}
}

func (l *lexer) errorf(at int, format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", at, fmt.Sprintf(format, args...))
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace skips blanks and comments.
func (l *lexer) skipSpace() {
	for l.i < len(l.s) {
		switch c := l.s[l.i]; {
		case isSpace(c):
			l.i++
		case c == '#':
			for l.i < len(l.s) && l.s[l.i] != '\n' {
				l.i++
			}
		default:
			return
		}
	}
}

// ident reads an identifier at l.i (which must start one).
func (l *lexer) ident() string {
	start := l.i
	for l.i < len(l.s) && isIdentChar(l.s[l.i]) {
		l.i++
	}
	return l.s[start:l.i]
}

// str reads a string literal at l.i and returns its unquoted text.
func (l *lexer) str() (string, error) {
	start, q := l.i, l.s[l.i]
	l.i++
	var b strings.Builder
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == q:
			l.i++
			return b.String(), nil
		case c == '\\' && q != '`':
			if l.i+1 >= len(l.s) {
				return "", l.errorf(start, "unterminated string")
			}
			b.WriteByte(l.s[l.i+1])
			l.i += 2
			continue
		case c == '\n' && q != '`':
			return "", l.errorf(start, "unterminated string")
		}
		b.WriteByte(c)
		l.i++
	}
	return "", l.errorf(start, "unterminated string")
}

// variable skips a Grafana variable: $name, ${name...} or $__name.
func (l *lexer) variable() error {
	start := l.i
	l.i++
	if l.i < len(l.s) && l.s[l.i] == '{' {
		end := strings.IndexByte(l.s[l.i:], '}')
		if end < 0 {
			return l.errorf(start, "unterminated ${...} variable")
		}
		l.i += end + 1
		return nil
	}
	if l.i >= len(l.s) || !isIdentChar(l.s[l.i]) {
		return l.errorf(start, "a lone $")
	}
	l.ident()
	return nil
}

// number skips a number or a duration (1, 0.5, 1e-3, 0x1f, 5m, 1h30m, Inf).
func (l *lexer) number() {
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case isIdentChar(c) || c == '.':
			l.i++
		case (c == '+' || c == '-') && (l.s[l.i-1] == 'e' || l.s[l.i-1] == 'E') && !strings.HasPrefix(strings.ToLower(l.s[:l.i]), "0x"):
			l.i++
		default:
			return
		}
	}
}

// matchers reads a {...} block of label matchers at l.i: the metric name may
// be given there as a bare string ({"name"}) or as __name__="name".
func (l *lexer) matchers() error {
	start := l.i
	l.i++
	owner := l.pending
	l.pending = -1
	if owner < 0 {
		// A selector without a name outside the braces: {__name__="x"}.
		l.sels = append(l.sels, Selector{})
		owner = len(l.sels) - 1
	}
	sel := &l.sels[owner]
	for {
		l.skipSpace()
		if l.i >= len(l.s) {
			return l.errorf(start, "unterminated {")
		}
		c := l.s[l.i]
		if c == '}' {
			l.i++
			return nil
		}
		if c == ',' {
			l.i++
			continue
		}
		var label string
		switch {
		case isIdentStart(c):
			label = l.ident()
		case c == '"' || c == '\'' || c == '`':
			s, err := l.str()
			if err != nil {
				return err
			}
			label = s
		case c == '$':
			if err := l.variable(); err != nil {
				return err
			}
			continue
		default:
			return l.errorf(l.i, "unexpected %q in label matchers", c)
		}
		l.skipSpace()
		op := ""
		for _, o := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(l.s[l.i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			if c == '"' || c == '\'' || c == '`' {
				l.add(label) // {"metric.name", ...}
				sel.Name = label
				continue
			}
			return l.errorf(l.i, "label %q without a matcher (=, !=, =~, !~)", label)
		}
		l.i += len(op)
		l.skipSpace()
		if l.i >= len(l.s) || (l.s[l.i] != '"' && l.s[l.i] != '\'' && l.s[l.i] != '`') {
			return l.errorf(l.i, "label %q: a string must follow %s", label, op)
		}
		at := l.i
		value, err := l.str()
		if err != nil {
			return err
		}
		if label == "__name__" {
			if op != "=" {
				return l.errorf(at, "__name__%s%q: only __name__=\"...\" names one metric", op, value)
			}
			l.add(value)
			sel.Name = value
		} else {
			sel.Labels = append(sel.Labels, label)
		}
	}
}

// closing skips from an opening bracket at l.i to its closing one, which
// must come before any other bracket (ranges, grouping label lists).
func (l *lexer) closing(open, close byte, what string) error {
	start := l.i
	l.i++
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == close:
			l.i++
			return nil
		case c == '#':
			l.skipSpace()
			continue
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.str(); err != nil {
				return err
			}
			continue
		case c == '$':
			if err := l.variable(); err != nil {
				return err
			}
			continue
		case c == open || c == '(' || c == ')' || c == '[' || c == ']' || c == '{' || c == '}':
			return l.errorf(l.i, "unexpected %q in %s", c, what)
		}
		l.i++
	}
	return l.errorf(start, "unterminated %s", what)
}

func (l *lexer) run() error {
	depth := 0
	for {
		l.skipSpace()
		if l.i >= len(l.s) {
			if depth != 0 {
				return l.errorf(l.i, "%d unclosed (", depth)
			}
			return nil
		}
		c := l.s[l.i]
		switch {
		case isIdentStart(c):
			word := l.ident()
			lower := strings.ToLower(word)
			l.skipSpace()
			next := byte(0)
			if l.i < len(l.s) {
				next = l.s[l.i]
			}
			switch {
			case groupings[lower]:
				if next == '(' {
					if err := l.closing('(', ')', word+" (...) label list"); err != nil {
						return err
					}
				} else if lower != "group_left" && lower != "group_right" {
					return l.errorf(l.i, "%s must be followed by a (label list)", word)
				}
			case aggregations[lower] || keywords[lower] || next == '(':
				// an operator or a function call, not a metric
			default:
				l.add(word)
				l.sels = append(l.sels, Selector{Name: word})
				if next == '{' {
					l.pending = len(l.sels) - 1
				}
			}
		case c >= '0' && c <= '9' || c == '.':
			l.number()
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.str(); err != nil {
				return err
			}
		case c == '{':
			if err := l.matchers(); err != nil {
				return err
			}
		case c == '[':
			if err := l.closing('[', ']', "range [...]"); err != nil {
				return err
			}
		case c == '$':
			if err := l.variable(); err != nil {
				return err
			}
		case c == '(':
			depth++
			l.i++
		case c == ')':
			if depth == 0 {
				return l.errorf(l.i, "unmatched )")
			}
			depth--
			l.i++
		case strings.IndexByte("+-*/%^=!<>,@", c) >= 0:
			l.i++
		default:
			return l.errorf(l.i, "unexpected %q", c)
		}
	}
}
