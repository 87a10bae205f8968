// Package adversarial makes the request bodies of issue 21's decoding
// attack for tests and benchmarks: JSON arrays of about a chosen size that
// pack as many values as their bytes allow (empty arrays, empty objects,
// tiny strings, zeros, nesting at the depth bound) or hold one value as
// large as the array (a huge number, a huge string). One table, so that
// every package's tests put the same shapes at their own positions.
package adversarial

import (
	"context"
	"fmt"
	"strings"
)

// Shape is one adversarial element.
type Shape struct {
	Name string
	// Elem is repeated as a flood's elements; "" for a shape of one large
	// value (One).
	Elem string
	One  func(size int) string
}

// Shapes returns the shapes, floods first; a new slice on every call.
func Shapes() []Shape {
	return []Shape{
		{Name: "EmptyArrays", Elem: "[]"},
		{Name: "EmptyObjects", Elem: "{}"},
		{Name: "TinyStrings", Elem: `""`},
		{Name: "Zeros", Elem: "0"},
		// 9990 levels, inside a route's own few: under encoding/json's 10000.
		{Name: "DeepNesting", Elem: strings.Repeat("[", 9990) + strings.Repeat("]", 9990)},
		{Name: "HugeNumber", One: func(n int) string { return "1" + strings.Repeat("0", n) }},
		{Name: "HugeString", One: func(n int) string { return `"` + strings.Repeat("a", n) + `"` }},
	}
}

// Count is how many elem a flood of about size bytes holds.
func Count(elem string, size int) int { return max(1, size/(len(elem)+1)) }

// Flood is the JSON array of shape name of about size bytes. An unknown
// name panics: a test's typo.
func Flood(name string, size int) string {
	for _, s := range Shapes() {
		if s.Name != name {
			continue
		}
		if s.One != nil {
			return "[" + s.One(size) + "]"
		}
		return "[" + strings.TrimSuffix(strings.Repeat(s.Elem+",", Count(s.Elem, size)), ",") + "]"
	}
	panic(fmt.Sprintf("adversarial: no shape %q", name))
}

// EndsAfter is a context that ends at its Looks-th call of Err: a decode
// that looks at its context at known points stops at a known one.
type EndsAfter struct {
	context.Context
	Looks int
}

// Err is context.Canceled from the Looks-th call on.
func (c *EndsAfter) Err() error {
	if c.Looks--; c.Looks < 0 {
		return context.Canceled
	}
	return nil
}
