package jsontree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox/internal/adversarial"
)

// unbounded is a Budget that never refuses, to count what a read uses.
func unbounded() *Budget { return NewBudget(context.Background(), math.MaxInt) }

// used is the values Decode keeps for data, as its Budget counts them
// (every value read, a repeated key's earlier ones too); -1 when data is
// not valid JSON.
func used(data []byte) int {
	b := unbounded()
	if _, err := b.Decode(data); err != nil {
		return -1
	}
	return math.MaxInt - b.nodes
}

// repeated is n copies of elem in a JSON array.
func repeated(elem string, n int) []byte {
	return []byte("[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]")
}

// shapes are the adversarial bodies of issue 21 at about size bytes: each
// packs as many values as it can, or one value as large as it can.
func shapes(size int) map[string][]byte {
	depth := nest(maxDepth - 1) // at the bound inside the outer array
	return map[string][]byte{
		"EmptyArrays":    repeated("[]", size/3),
		"EmptyObjects":   repeated("{}", size/3),
		"OneMember":      repeated(`{"a":0}`, size/8),
		"TinyStrings":    repeated(`""`, size/3),
		"Zeros":          repeated("0", size/2),
		"DeepNesting":    repeated(depth, size/(len(depth)+1)),
		"HugeNumber":     []byte("1" + strings.Repeat("0", size)),
		"HugeExponent":   []byte("[1e" + strings.Repeat("9", size) + "]"),
		"HugeString":     []byte(`"` + strings.Repeat("a", size) + `"`),
		"EscapedString":  []byte(`"` + strings.Repeat(`\n`, size/2) + `"`),
		"WideObject":     wideObject(size / 12),
		"Whitespace":     []byte("[" + strings.Repeat(" ", size) + "]"),
		"EscapedKeyWide": []byte("{" + strings.TrimSuffix(strings.Repeat(`"\u0061":0,`, size/11), ",") + "}"),
	}
}

// wideObject is an object of n members with distinct keys.
func wideObject(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%x":0`, i)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func TestBudgetDecodeCountsValues(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		nodes int
		want  error
	}{
		{"Scalar", `1`, 1, nil},
		{"ScalarNoBudget", `1`, 0, ErrBudget},
		{"EmptyArray", `[]`, 1, nil},
		{"ArrayOfThree", `[1,2,3]`, 4, nil},
		{"ArrayOfThreeShort", `[1,2,3]`, 3, ErrBudget},
		{"ObjectMembers", `{"a":1,"b":[true]}`, 4, nil},
		{"ObjectMembersShort", `{"a":1,"b":[true]}`, 3, ErrBudget},
		{"RepeatedKeyCountsBoth", `{"a":1,"a":2}`, 2, ErrBudget},
		{"SyntaxFirst", `[1,2,`, 100, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(context.Background(), tt.nodes)
			got, err := b.Decode([]byte(tt.in))
			if !errors.Is(err, tt.want) || tt.want == nil && err != nil {
				t.Fatalf("Decode(%q) under %d = %v, %v; want error %v", tt.in, tt.nodes, got, err, tt.want)
			}
			if tt.want == ErrBudget && !errors.Is(b.Err(), ErrBudget) {
				t.Errorf("Err() = %v after a refusal; want ErrBudget", b.Err())
			}
			if tt.want == nil {
				want, _ := Decode([]byte(tt.in))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Decode(%q) under a budget mismatch (-unbounded +budget):\n%s", tt.in, diff)
				}
			}
		})
	}
}

func TestBudgetRefusalSticks(t *testing.T) {
	b := NewBudget(context.Background(), 2)
	if _, err := b.Decode([]byte(`[1,2,3]`)); !errors.Is(err, ErrBudget) {
		t.Fatalf("Decode over the budget error = %v; want ErrBudget", err)
	}
	if _, _, ok := b.Array([]byte(`[]`), 1); ok {
		t.Error("Array after a refusal ok; want every later read refused")
	}
	if _, err := b.Split([]byte(`{}`)); !errors.Is(err, ErrBudget) {
		t.Errorf("Split after a refusal error = %v; want ErrBudget", err)
	}
	if _, ok := b.String([]byte(`"a"`)); ok {
		t.Error("String after a refusal ok; want refused")
	}
}

func TestBudgetSplitCountsMembers(t *testing.T) {
	in := []byte(`{"a":[1,2,3],"b":{},"c":null}`)
	if _, err := NewBudget(context.Background(), 3).Split(in); err != nil {
		t.Fatalf("Split of 3 members under 3 error: %v", err)
	}
	if _, err := NewBudget(context.Background(), 2).Split(in); !errors.Is(err, ErrBudget) {
		t.Fatalf("Split of 3 members under 2 error = %v; want ErrBudget", err)
	}
}

// shapeSize is the size of the adversarial shapes in the tests.
var shapeSize = map[bool]int{false: 1 << 20, true: 256 << 10}[raceEnabled]

// TestBudgetBoundsAdversarialShapes decodes each shape of issue 21 under
// the budget of its size without the floor (NodesFor less NodeFloor, so
// that the bound shows per byte): the dense ones are refused, and whatever
// the shape, the decode allocates at most 7.2 bytes per body byte: the
// budget's values at their dearest (a small object's map with its first
// group, under 400 bytes, one per NodeBytes of body) and 4 bytes per byte
// for the rest (a string's copy, the slices' growth).
func TestBudgetBoundsAdversarialShapes(t *testing.T) {
	const perNode = 400
	for name, data := range shapes(shapeSize) {
		t.Run(name, func(t *testing.T) {
			nodes := len(data) / NodeBytes
			b := NewBudget(context.Background(), nodes)
			var err error
			alloc := allocated(func() { _, err = b.Decode(data) })
			if limit := uint64(nodes*perNode + 4*len(data)); alloc > limit {
				t.Errorf("Decode allocated %d bytes for %d (%.1f×); want at most %d", alloc, len(data), float64(alloc)/float64(len(data)), limit)
			}
			if err != nil && !errors.Is(err, ErrBudget) {
				t.Errorf("Decode error = %v; want nil or ErrBudget", err)
			}
			if n := used(data); (n > nodes) != (err != nil) {
				t.Errorf("Decode error = %v for %d values under %d", err, n, nodes)
			}
		})
	}
}

// allocated is the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// endsAfter is a context that ends at its looks-th call of Err
// (adversarial.EndsAfter).
type endsAfter = adversarial.EndsAfter

// TestBudgetStopsWithinCheckBytes ends the context at the budget's third
// look: every read of every shape stops with ErrStopped before it has
// read four CheckBytes past the start, whatever the shape (a run of
// whitespace, digits or escapes, nesting, members).
func TestBudgetStopsWithinCheckBytes(t *testing.T) {
	size := shapeSize
	reads := map[string]func(b *Budget, data []byte) error{
		"Decode": func(b *Budget, data []byte) error { _, err := b.Decode(data); return err },
		"Split":  func(b *Budget, data []byte) error { _, err := b.Split(data); return err },
		"Array": func(b *Budget, data []byte) error {
			b.Array(data, math.MaxInt)
			return b.Err()
		},
		"Fields": func(b *Budget, data []byte) error {
			b.Fields(data, []string{"a"}, make([]json.RawMessage, 1))
			return b.Err()
		},
		"String": func(b *Budget, data []byte) error {
			b.String(data)
			return b.Err()
		},
		"Compact": func(b *Budget, data []byte) error {
			b.Compact(nil, data)
			return b.Err()
		},
	}
	for shape, data := range shapes(size) {
		for read, fn := range reads {
			t.Run(shape+"/"+read, func(t *testing.T) {
				ctx := &endsAfter{Context: context.Background(), Looks: 3}
				b := NewBudget(ctx, math.MaxInt)
				err := fn(b, data)
				if !errors.Is(b.Err(), ErrStopped) {
					// A read that refuses the shape at once (Split of an
					// array) may end before its third look.
					if ctx.Looks >= 0 {
						return
					}
					t.Fatalf("%s: Err() = %v (read error %v); want ErrStopped", read, b.Err(), err)
				}
				if err != nil && !errors.Is(err, ErrStopped) {
					t.Errorf("%s error = %v; want ErrStopped", read, err)
				}
				var off int
				if err != nil {
					fmt.Sscanf(err.Error()[strings.LastIndex(err.Error(), "offset ")+len("offset "):], "%d", &off)
					if off > 4*CheckBytes {
						t.Errorf("%s stopped at offset %d; want within %d", read, off, 4*CheckBytes)
					}
				}
			})
		}
	}
}

func TestBudgetStoppedContextRefusesAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := NewBudget(ctx, math.MaxInt)
	if _, err := b.Decode([]byte(`1`)); !errors.Is(err, ErrStopped) {
		t.Errorf("Decode under an ended context error = %v; want ErrStopped", err)
	}
}

func TestDecodeUnique(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"Distinct", `{"a":1,"b":{"a":2}}`, nil},
		{"Repeated", `{"a":1,"a":2}`, ErrDuplicateKey},
		{"RepeatedEscaped", `{"a":1,"\u0061":2}`, ErrDuplicateKey},
		{"RepeatedNested", `{"x":[{"k":1,"k":1}]}`, ErrDuplicateKey},
		{"SameKeyInSiblings", `[{"k":1},{"k":1}]`, nil},
		{"Invalid", `{"a":1,"b":`, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := unbounded()
			_, err := b.DecodeUnique([]byte(tt.in))
			if !errors.Is(err, tt.want) || tt.want == nil && err != nil {
				t.Fatalf("DecodeUnique(%q) error = %v; want %v", tt.in, err, tt.want)
			}
			if _, err := b.Decode([]byte(`{"a":1,"a":2}`)); err != nil {
				t.Errorf("Decode after DecodeUnique error = %v; want repeats allowed again", err)
			}
		})
	}
}

func TestArray(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		max   int
		items []string
		n     int
		ok    bool
	}{
		{"Empty", `[]`, 2, []string{}, 0, true},
		{"Under", ` [ 1 , "a" ] `, 2, []string{`1`, `"a"`}, 2, true},
		{"AtMax", `[1,2]`, 2, []string{`1`, `2`}, 2, true},
		{"Over", `[1,2,3,4]`, 2, []string{`1`, `2`}, 3, true},
		{"OverStopsReading", `[1,2,3,oops`, 2, []string{`1`, `2`}, 3, true},
		{"Strings", `["a\"]","\\",""]`, 3, []string{`"a\"]"`, `"\\"`, `""`}, 3, true},
		{"Nested", `[[1,[2]],{"a":[]}]`, 5, []string{`[1,[2]]`, `{"a":[]}`}, 2, true},
		{"NotArray", `{"a":1}`, 2, nil, 0, false},
		{"Null", `null`, 2, nil, 0, false},
		{"Absent", ``, 2, nil, 0, false},
		{"Trailing", `[1] 2`, 2, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, n, ok := unbounded().Array([]byte(tt.in), tt.max)
			got := rawStrings(items)
			if n != tt.n || ok != tt.ok || !ok && items != nil || ok && !slices.Equal(got, tt.items) {
				t.Errorf("Array(%q, %d) = %q, %d, %v; want %q, %d, %v", tt.in, tt.max, got, n, ok, tt.items, tt.n, tt.ok)
			}
		})
	}
}

func rawStrings(items []json.RawMessage) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, string(it))
	}
	return out
}

func TestFields(t *testing.T) {
	names := []string{"type", "text"}
	tests := []struct {
		name  string
		in    string
		vals  []string
		other string
		ok    bool
	}{
		{"Both", `{"text":"hi","type":"text"}`, []string{`"text"`, `"hi"`}, "", true},
		{"Absent", `{"type":null}`, []string{`null`, ``}, "", true},
		{"LastWins", `{"type":"a","type":{"x":1}}`, []string{`{"x":1}`, ``}, "", true},
		{"EscapedName", `{"\u0074ype":"t"}`, []string{`"t"`, ``}, "", true},
		{"Others", `{"zeta":1,"type":"t","alpha":2,"beta":3}`, []string{`"t"`, ``}, "alpha", true},
		{"EmptyKeyIsOther", `{"":1}`, []string{``, ``}, "", true},
		{"Empty", `{}`, []string{``, ``}, "", true},
		{"NotObject", `[]`, nil, "", false},
		{"QuotesInValues", `{"text":"a\"}\\","type":["}",{"x":"]"}]}`, []string{`["}",{"x":"]"}]`, `"a\"}\\"`}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals := make([]json.RawMessage, len(names))
			other, hasOther, ok := unbounded().Fields([]byte(tt.in), names, vals)
			if ok != tt.ok {
				t.Fatalf("Fields(%q) ok = %v; want %v", tt.in, ok, tt.ok)
			}
			if !ok {
				return
			}
			if got := rawStrings(vals); !slices.Equal(got, tt.vals) {
				t.Errorf("Fields(%q) values = %q; want %q", tt.in, got, tt.vals)
			}
			wantOther := tt.other != "" || tt.name == "EmptyKeyIsOther"
			if other != tt.other || hasOther != wantOther {
				t.Errorf("Fields(%q) other = %q, %v; want %q, %v", tt.in, other, hasOther, tt.other, wantOther)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			checkString(t, []byte(tt.in))
		})
	}
}

// checkString holds String to json.Unmarshal into a string, for JSON
// strings only (Unmarshal takes null as "").
func checkString(t *testing.T, data []byte) {
	t.Helper()
	var want string
	wantOK := json.Unmarshal(data, &want) == nil && len(bytes.TrimSpace(data)) > 0 && bytes.TrimSpace(data)[0] == '"'
	got, ok := unbounded().String(data)
	if ok != wantOK || got != want && ok {
		t.Fatalf("String(%q) = %q, %v; encoding/json: %q, %v", short(string(data)), got, ok, want, wantOK)
	}
}

func FuzzBudgetDecode(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in), uint16(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, nodes uint16) {
		n := used(data)
		got, err := NewBudget(context.Background(), int(nodes)).Decode(data)
		switch {
		case n < 0: // the budget may refuse before the syntax error comes
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrBudget) {
				t.Fatalf("Decode(%q) under %d error = %v; want ErrSyntax or ErrBudget", short(string(data)), nodes, err)
			}
		case n > int(nodes):
			if !errors.Is(err, ErrBudget) {
				t.Fatalf("Decode(%q) of %d values under %d error = %v; want ErrBudget", short(string(data)), n, nodes, err)
			}
		default:
			want, _ := Decode(data)
			if err != nil || !reflect.DeepEqual(want, got) {
				t.Fatalf("Decode(%q) of %d values under %d = %v, %v; want the unbounded tree", short(string(data)), n, nodes, got, err)
			}
		}
	})
}

func FuzzArrayAgreesWithEncodingJSON(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in), uint8(2))
		f.Add([]byte("["+in+"]"), uint8(1))
		f.Add([]byte("[1,"+in+",2]"), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, max uint8) {
		if !json.Valid(data) {
			return // Array reads what a validating read passed
		}
		var want []json.RawMessage
		isArray := json.Unmarshal(data, &want) == nil && want != nil
		items, n, ok := unbounded().Array(data, int(max))
		switch {
		case isArray && len(want) <= int(max):
			if !ok || n != len(want) || !slices.EqualFunc(items, want, rawEqual) {
				t.Fatalf("Array(%q, %d) = %q, %d, %v; encoding/json: %q", short(string(data)), max, items, n, ok, want)
			}
		case isArray:
			if !ok || n != int(max)+1 || !slices.EqualFunc(items, want[:max], rawEqual) {
				t.Fatalf("Array(%q, %d) = %q, %d, %v; want the first %d of %q and n %d", short(string(data)), max, items, n, ok, max, want, max+1)
			}
		case ok && n <= int(max):
			t.Fatalf("Array(%q, %d) = %q, %d, ok; encoding/json refuses it as an array", short(string(data)), max, items, n)
		}
	})
}

func rawEqual(a, b json.RawMessage) bool { return bytes.Equal(a, b) }

func FuzzFieldsAgreesWithSplit(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in))
		f.Add([]byte(`{"type":` + in + `,"x":1}`))
	}
	names := []string{"type", "text", ""}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // Fields reads what a validating read passed
		}
		want, wantErr := referenceSplit(data)
		vals := make([]json.RawMessage, len(names))
		other, hasOther, ok := unbounded().Fields(data, names, vals)
		if ok != (wantErr == nil) {
			t.Fatalf("Fields(%q) ok = %v; encoding/json: %v", short(string(data)), ok, wantErr)
		}
		if !ok {
			return
		}
		var wantOther string
		var wantHas bool
		for k, v := range want {
			i := slices.Index(names, k)
			if i >= 0 {
				if !bytes.Equal(vals[i], v) {
					t.Fatalf("Fields(%q)[%q] = %q; encoding/json: %q", short(string(data)), k, vals[i], v)
				}
				continue
			}
			if !wantHas || k < wantOther {
				wantOther, wantHas = k, true
			}
		}
		for i, name := range names {
			if _, present := want[name]; !present && vals[i] != nil {
				t.Fatalf("Fields(%q)[%q] = %q; encoding/json: absent", short(string(data)), name, vals[i])
			}
		}
		if other != wantOther || hasOther != wantHas {
			t.Fatalf("Fields(%q) other = %q, %v; want %q, %v", short(string(data)), other, hasOther, wantOther, wantHas)
		}
	})
}

func FuzzString(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkString(t, data)
	})
}

func FuzzDecodeUnique(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := unbounded().DecodeUnique(data)
		want, wantErr := Decode(data)
		switch {
		case wantErr != nil:
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrDuplicateKey) {
				t.Fatalf("DecodeUnique(%q) error = %v; want a refusal", short(string(data)), err)
			}
		case repeatsKey(data) != errors.Is(err, ErrDuplicateKey):
			t.Fatalf("DecodeUnique(%q) error = %v; a token walk finds a repeat: %v (tree %v)", short(string(data)), err, repeatsKey(data), want)
		}
	})
}

// repeatsKey reports whether valid JSON data repeats a key within one
// object, walking encoding/json's tokens (the broker's earlier check).
func repeatsKey(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		keys        map[string]bool
		object, key bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				if top >= 0 && stack[top].object {
					stack[top].key = true
				}
				stack = append(stack, frame{keys: map[string]bool{}, object: d == '{', key: d == '{'})
			} else {
				stack = stack[:top]
			}
			continue
		}
		if s, ok := tok.(string); ok && top >= 0 && stack[top].object && stack[top].key {
			if stack[top].keys[s] {
				return true
			}
			stack[top].keys[s], stack[top].key = true, false
			continue
		}
		if top >= 0 && stack[top].object {
			stack[top].key = true
		}
	}
}

func TestCompactAgreesWithEncodingJSON(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			checkCompact(t, []byte(tt.in))
		})
	}
}

// checkCompact holds Compact and Valid to json.Compact and json.Valid.
func checkCompact(t *testing.T, data []byte) {
	t.Helper()
	var want bytes.Buffer
	wantErr := json.Compact(&want, data)
	got, ok := unbounded().Compact([]byte("x"), data)
	if ok != (wantErr == nil) || ok && string(got) != "x"+want.String() {
		t.Fatalf("Compact(%q) = %q, %v; encoding/json: %q, %v", short(string(data)), got, ok, want.String(), wantErr)
	}
	if v := unbounded().Valid(data); v != json.Valid(data) {
		t.Fatalf("Valid(%q) = %v; json.Valid says %v", short(string(data)), v, !v)
	}
}

// smallCases are the cases short enough to seed a fuzz target: the deep
// ones cost the fuzzer seconds of minimising and are table-tested.
func smallCases() []string {
	var out []string
	for _, tt := range cases {
		if len(tt.in) < 1<<10 {
			out = append(out, tt.in)
		}
	}
	return out
}

func FuzzCompact(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCompact(t, data)
	})
}

// checkScan holds Scan to encoding/json's Decoder.Token: the same tokens
// in the same order, and the same decision.
func checkScan(t *testing.T, data []byte) {
	t.Helper()
	var got []string
	ok := unbounded().Scan(data, func(tok Token) bool {
		switch tok.Kind {
		case ':', '"':
			got = append(got, fmt.Sprintf("%c%q", tok.Kind, tok.String()))
		default:
			got = append(got, string(tok.Raw))
		}
		return true
	})
	if ok != json.Valid(data) {
		t.Fatalf("Scan(%q) ok = %v; json.Valid says %v", short(string(data)), ok, !ok)
	}
	if !ok {
		return
	}
	var want []string
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct{ object, wantKey bool }
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		top := len(stack) - 1
		if s, ok := tok.(string); ok && top >= 0 && stack[top].wantKey {
			want = append(want, fmt.Sprintf(":%q", s))
			stack[top].wantKey = false
			continue
		}
		if top >= 0 && stack[top].object {
			stack[top].wantKey = true // after this value, a key
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, frame{object: v == '{', wantKey: v == '{'})
			default:
				stack = stack[:top]
			}
			want = append(want, v.String())
		case string:
			want = append(want, fmt.Sprintf(`"%q`, v))
		case json.Number:
			want = append(want, string(v))
		case bool:
			want = append(want, fmt.Sprint(v))
		case nil:
			want = append(want, "null")
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Scan(%q) tokens mismatch (-encoding/json +jsontree):\n%s", short(string(data)), diff)
	}
}

func TestScanAgreesWithEncodingJSON(t *testing.T) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			checkScan(t, []byte(tt.in))
		})
	}
}

func FuzzScanAgreesWithEncodingJSON(f *testing.F) {
	for _, in := range smallCases() {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data)
	})
}

// The views remember a long string's end by its opening quote: reading
// the levels above it again (an element, then its members) finds the same
// values, escapes and runs of backslashes at its end included.
func TestViewsRememberLongStrings(t *testing.T) {
	long := strings.Repeat(`a\"b\\`, longString) + `\\\\` // ends in an even run
	doc := []byte(`[{"x":"` + long + `","y":[1,"` + long + `"],"z":2},"` + long + `"]`)
	b := unbounded()
	for round := range 2 { // the second round reads the remembered ends
		items, n, ok := b.Array(doc, 5)
		if !ok || n != 2 || string(items[1]) != `"`+long+`"` {
			t.Fatalf("round %d: Array = %d items, %v", round, n, ok)
		}
		vals := make([]json.RawMessage, 3)
		if _, _, ok := b.Fields(items[0], []string{"x", "y", "z"}, vals); !ok {
			t.Fatalf("round %d: Fields not ok", round)
		}
		if string(vals[0]) != `"`+long+`"` || string(vals[2]) != "2" || !bytes.HasSuffix(vals[1], []byte(`"]`)) {
			t.Fatalf("round %d: Fields = %.40q…", round, vals)
		}
		got, ok := b.String(vals[0])
		var s string
		json.Unmarshal(vals[0], &s)
		if !ok || got != s {
			t.Fatalf("round %d: String differs from encoding/json", round)
		}
	}
	if len(b.strings) == 0 {
		t.Error("no long string remembered")
	}
}
