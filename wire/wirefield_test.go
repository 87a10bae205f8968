package wire_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/wire"
)

// TestFillNamesBadMember: Fill refuses with a *MemberError that wraps
// ErrMember and names the first member, in field order, that is missing,
// null or of the wrong type; a name equal only under case folding is not
// the member.
func TestFillNamesBadMember(t *testing.T) {
	type probe struct {
		A wire.String  `json:"a"`
		B wire.Bool    `json:"b"`
		C *wire.Int    `json:"c,omitempty"`
		D wire.Strings `json:"d,omitempty"`
	}
	for _, tc := range []struct {
		name, data, member string
		ok                 bool
	}{
		{"all", `{"a":"x","b":true,"c":3,"d":["y"]}`, "", true},
		{"optional-absent", `{"a":"x","b":false}`, "", true},
		{"not-object", `["a"]`, "", false},
		{"trailing", `{"a":"x","b":true} {}`, "", false},
		{"a-missing", `{"b":true}`, "a", false},
		{"a-folded", `{"A":"x","b":true}`, "a", false},
		{"b-null", `{"a":"x","b":null}`, "b", false},
		{"c-float", `{"a":"x","b":true,"c":1.5}`, "c", false},
		{"d-null-item", `{"a":"x","b":true,"d":[null]}`, "d", false},
		{"first-in-field-order", `{"b":"no","a":1}`, "a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p probe
			err := wire.Fill([]byte(tc.data), &p)
			if tc.ok {
				if err != nil {
					t.Fatalf("Fill(%s) = %v", tc.data, err)
				}
				return
			}
			var me *wire.MemberError
			if !errors.Is(err, wire.ErrMember) || !errors.As(err, &me) {
				t.Fatalf("Fill(%s) = %v; want a *MemberError", tc.data, err)
			}
			if diff := cmp.Diff(tc.member, me.Member); diff != "" {
				t.Fatalf("Fill(%s) member (-want +got):\n%s", tc.data, diff)
			}
		})
	}
}

// errProbe is a member type's own refusal, which a MemberError carries.
var errProbe = errors.New("probe refused")

type probeMember struct{}

func (*probeMember) UnmarshalJSON([]byte) error { return errProbe }

// TestFillLenientMembers: an OptString reads null and any other type as
// absent; a Checked records a bad value (null included) and never fails
// the fill, its last value counting; a member type's own error is kept
// in the MemberError.
func TestFillLenientMembers(t *testing.T) {
	type lenient struct {
		S wire.OptString          `json:"s,omitempty"`
		C wire.Checked[wire.Bool] `json:"c,omitempty"`
	}
	for _, tc := range []struct {
		name, data string
		want       lenient
	}{
		{"values", `{"s":"x","c":true}`, lenient{S: wire.OptString{Value: "x", Set: true}, C: wire.Checked[wire.Bool]{Value: true, Present: true}}},
		{"nulls", `{"s":null,"c":null}`, lenient{C: wire.Checked[wire.Bool]{Present: true, Bad: true}}},
		{"other-types", `{"s":1,"c":"true"}`, lenient{C: wire.Checked[wire.Bool]{Present: true, Bad: true}}},
		{"absent", `{}`, lenient{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got lenient
			if err := wire.Fill([]byte(tc.data), &got); err != nil {
				t.Fatalf("Fill(%s) = %v", tc.data, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("Fill(%s) (-want +got):\n%s", tc.data, diff)
			}
		})
	}
	var p struct {
		P probeMember `json:"p"`
	}
	if err := wire.Fill([]byte(`{"p":1}`), &p); !errors.Is(err, errProbe) || !errors.Is(err, wire.ErrMember) {
		t.Fatalf("Fill = %v; want the member type's error within a MemberError", err)
	}
}
