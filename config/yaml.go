package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox"
)

// problem is one broken rule. It unwraps to rtsandbox.ErrInvalid so callers
// classify config errors with errors.Is, never by their text.
type problem struct {
	path string // key path such as "tools[0].url"; "" for the whole file
	rule string
	line int // 0 when unknown
}

func (p *problem) Error() string {
	path := p.path
	if path == "" {
		path = "config"
	}
	if p.line > 0 {
		return fmt.Sprintf("%s: %s (line %d)", path, p.rule, p.line)
	}
	return path + ": " + p.rule
}

func (p *problem) Unwrap() error { return rtsandbox.ErrInvalid }

// document decodes data as exactly one YAML document whose top level is a
// mapping. A second document is refused rather than ignored: the operator
// may believe its settings apply.
func document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, &problem{rule: "the file is empty"}
	case err != nil:
		return nil, &problem{rule: err.Error()}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &problem{rule: "holds more than one YAML document", line: extra.Line}
	case !errors.Is(err, io.EOF):
		return nil, &problem{rule: err.Error()}
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &problem{rule: "the top level must be a mapping", line: root.Line}
	}
	return root, nil
}

// parser collects problems while it walks the document, so one run reports
// all of them.
type parser struct {
	allowHTTP bool
	errs      []error
}

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	pr := &problem{path: path, rule: fmt.Sprintf(format, args...)}
	if n != nil {
		pr.line = n.Line
	}
	p.errs = append(p.errs, pr)
}

func (p *parser) err() error { return errors.Join(p.errs...) }

// object is one config mapping whose keys were checked against the schema.
type object struct {
	node   *yaml.Node
	path   string
	fields map[string]*yaml.Node
}

// at returns the key path of key inside o.
func (o object) at(key string) string { return keyPath(o.path, key) }

// get returns the value at key, or nil when the key is absent or null: an
// empty YAML value ("key:") means "not set", as readers of YAML expect.
func (o object) get(key string) *yaml.Node {
	n := o.fields[key]
	if n == nil || isNull(n) {
		return nil
	}
	return n
}

// object checks that n is a mapping with only known, unique, alias-free
// keys. It reports false when n is not a mapping at all.
func (p *parser) object(n *yaml.Node, path string, known ...string) (object, bool) {
	o := object{node: n, path: path, fields: map[string]*yaml.Node{}}
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping")
		return o, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := keyPath(path, k.Value)
		_, dup := o.fields[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode:
			p.fail(k, path, "keys must be strings")
		case !slices.Contains(known, k.Value):
			p.fail(k, kp, "unknown key")
		case dup:
			p.fail(k, kp, "duplicate key")
		case v.Kind == yaml.AliasNode:
			o.fields[k.Value] = nil
			p.fail(v, kp, "YAML aliases are not supported")
		default:
			o.fields[k.Value] = v
		}
	}
	return o, true
}

// list returns the items of the sequence at key; nil when absent.
func (p *parser) list(o object, key string) []*yaml.Node {
	n := o.get(key)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(n, o.at(key), "must be a list")
		return nil
	}
	items := make([]*yaml.Node, 0, len(n.Content))
	for i, item := range n.Content {
		if item.Kind == yaml.AliasNode {
			p.fail(item, index(o.at(key), i), "YAML aliases are not supported")
			continue
		}
		items = append(items, item)
	}
	return items
}

// required reports a missing key and returns false, or returns true. A key
// whose value was already refused (an alias) counts as present, so it is
// reported once.
//
// The problem points where the operator must write: at an empty key's own
// line; at the mapping that lacks the key; and at no line for a key the
// file lacks at its top level (line 1 would point at whatever key happens
// to come first).
func (p *parser) required(o object, key string) bool {
	n, written := o.fields[key]
	switch {
	case written && n != nil && isNull(n):
		p.fail(n, o.at(key), "is required (the key is there with no value)")
	case written:
		return true
	case o.path == "":
		p.fail(nil, o.at(key), "is required (the file has no top-level %s: key)", key)
	default:
		p.fail(o.node, o.at(key), "is required (%s has no %s: key)", o.path, key)
	}
	return false
}

// rule checks a string and returns the broken rule, or "" when it holds.
type rule func(string) string

// text returns the string at key after applying rules. ok is false when the
// key is absent or broke a rule (which is then reported).
func (p *parser) text(o object, key string, req bool, rules ...rule) (s string, ok bool) {
	if req && !p.required(o, key) {
		return "", false
	}
	n := o.get(key)
	if n == nil {
		return "", false
	}
	if !isString(n) {
		p.fail(n, o.at(key), "must be a string")
		return "", false
	}
	for _, r := range rules {
		if msg := r(n.Value); msg != "" {
			p.fail(n, o.at(key), "%s", msg)
			return "", false
		}
	}
	return n.Value, true
}

// boolean returns the bool at key, false when absent.
func (p *parser) boolean(o object, key string) bool {
	n := o.get(key)
	if n == nil {
		return false
	}
	var b bool
	if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		p.fail(n, o.at(key), "must be true or false")
	}
	return b
}

// integer returns the YAML integer at key within [lo, hi], or def when the
// key is absent. Floats and strings are refused: "1.5" or "512" for a limit
// is more likely a mistake than an intent.
func (p *parser) integer(o object, key string, def, lo, hi int) int {
	n := o.get(key)
	if n == nil {
		return def
	}
	if n.ShortTag() != "!!int" {
		p.fail(n, o.at(key), "must be an integer")
		return def
	}
	var v int
	switch err := n.Decode(&v); {
	case err != nil || v > hi:
		p.fail(n, o.at(key), "must be an integer of at most %d", hi)
	case v < lo:
		p.fail(n, o.at(key), "must be an integer of at least %d", lo)
	default:
		return v
	}
	return def
}

// isNull reports whether n is a YAML null such as "~" or an empty value.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// isString reports whether n is a string scalar. YAML 1.1 timestamps such
// as 2024-01-01 count as strings, as in the YAML 1.2 core schema.
func isString(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode {
		return false
	}
	t := n.ShortTag()
	return t == "!!str" || t == "!!timestamp"
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// keyPath appends key to path; keys that would make the path ambiguous
// are quoted.
func keyPath(path, key string) string {
	switch {
	case !plainKey.MatchString(key):
		return fmt.Sprintf("%s[%q]", path, key)
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
