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
