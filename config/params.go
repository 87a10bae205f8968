package config

import (
	"bytes"
	"encoding/json"

	"go.yaml.in/yaml/v3"
)

// params converts the JSON Schema mapping at key to compact JSON. It walks
// the YAML nodes itself instead of decoding into Go maps, because maps would
// lose the key order the operator wrote (and models read schemas in order).
func (p *parser) params(o object, key string, req bool) json.RawMessage {
	if req && !p.required(o, key) {
		return nil
	}
	n := o.get(key)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, o.at(key), "must be a mapping (a JSON Schema object)")
		return nil
	}
	var buf bytes.Buffer
	before := len(p.errs)
	p.writeJSON(&buf, n, o.at(key))
	if len(p.errs) > before {
		return nil
	}
	return json.RawMessage(buf.Bytes())
}

func (p *parser) writeJSON(b *bytes.Buffer, n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		p.writeObject(b, n, path)
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			p.writeJSON(b, item, index(path, i))
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		p.writeScalar(b, n, path)
	case yaml.AliasNode:
		// Refused rather than expanded: expansion would need cycle and
		// blow-up guards, and a schema reads fine without aliases.
		p.fail(n, path, "YAML aliases are not supported")
	default:
		p.fail(n, path, "unsupported YAML node")
	}
}

// writeObject keeps the YAML key order. JSON object keys are strings, so
// other key types are refused rather than converted (entries).
func (p *parser) writeObject(b *bytes.Buffer, n *yaml.Node, path string) {
	b.WriteByte('{')
	for i, e := range p.entries(n, path) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(marshal(e.key.Value))
		b.WriteByte(':')
		p.writeJSON(b, e.val, e.path)
	}
	b.WriteByte('}')
}

// writeScalar maps the resolved YAML tag to the JSON type, as the YAML 1.2
// core schema does. Other tags (!!binary, custom ones) have no JSON form.
func (p *parser) writeScalar(b *bytes.Buffer, n *yaml.Node, path string) {
	var v any
	var err error
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp":
		v = n.Value
	case "!!null":
		v = nil
	case "!!bool":
		var x bool
		err = n.Decode(&x)
		v = x
	case "!!int":
		err = n.Decode(&v) // int, int64 or uint64, as the value needs
	case "!!float":
		var x float64
		err = n.Decode(&x)
		v = x
		if err == nil && !finite(x) {
			p.fail(n, path, "must be finite: JSON has no NaN or infinity")
			return
		}
	default:
		p.fail(n, path, "unsupported YAML tag %s", tag)
		return
	}
	if err != nil {
		p.fail(n, path, "is not a valid %s", n.ShortTag())
		return
	}
	b.Write(marshal(v))
}

// marshal encodes a JSON scalar without escaping <, > and &: the schema
// text goes to a model, not into HTML.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings, bools, finite numbers and nil always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
