package access

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

var identityTests = []struct {
	name string
	in   string
	ok   bool
	role bool
}{
	{"discord-user", "discord:123456789012345678", true, false},
	{"http-user", "http:alice", true, false},
	{"discord-role", "discord:role:42", true, true},
	{"subject-with-colons", "web:a:b:c", true, false},
	{"provider-with-dash-underscore", "my-surface_2:x", true, false},
	{"max-length", "h:" + strings.Repeat("a", 254), true, false},
	{"too-long", "h:" + strings.Repeat("a", 255), false, false},
	{"no-colon", "alice", false, false},
	{"empty", "", false, false},
	{"empty-provider", ":alice", false, false},
	{"empty-subject", "http:", false, false},
	{"upper-provider", "Discord:1", false, false},
	{"digit-provider", "1d:1", false, false},
	{"long-provider", strings.Repeat("a", 33) + ":1", false, false},
	{"space-in-subject", "http:al ice", false, false},
	{"newline-in-subject", "http:al\nice", false, false},
	{"nbsp-in-subject", "http:al\u00a0ice", false, false},
	{"zero-width-in-subject", "http:al\u200bice", false, false},
	{"invalid-utf8", "http:\xff", false, false},
	{"role-without-id", "discord:role:", false, false},
	{"bare-role", "discord:role", false, false},
	{"dot-dot", "http:foo/..", true, false},
}

func TestParseIdentity(t *testing.T) {
	for _, tt := range identityTests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := ParseIdentity(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseIdentity(%q) = %q, %v; want ok %v", tt.in, id, err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrIdentity) || !errors.Is(err, rtsandbox.ErrInvalid) {
					t.Errorf("ParseIdentity(%q) error %v; want ErrIdentity", tt.in, err)
				}
				return
			}
			if id.IsRole() != tt.role {
				t.Errorf("ParseIdentity(%q).IsRole() = %v; want %v", tt.in, id.IsRole(), tt.role)
			}
			if got := id.Provider() + ":" + id.Subject(); got != tt.in || id.String() != tt.in {
				t.Errorf("ParseIdentity(%q) parts rejoin to %q", tt.in, got)
			}
		})
	}
}

func TestUserAndRole(t *testing.T) {
	if id, err := User("discord", "1"); err != nil || id != "discord:1" {
		t.Errorf(`User("discord", "1") = %q, %v`, id, err)
	}
	if _, err := User("discord", "role:1"); err == nil {
		t.Errorf(`User("discord", "role:1") = nil error; want refusal (it would be a role)`)
	}
	if id, err := Role("discord", "42"); err != nil || id != "discord:role:42" || !id.IsRole() {
		t.Errorf(`Role("discord", "42") = %q, %v`, id, err)
	}
}

func TestNewRefusesRoleOwner(t *testing.T) {
	if _, err := New(Rules{Owners: []Identity{"discord:role:1"}}); !errors.Is(err, ErrIdentity) {
		t.Errorf("New with a role owner = %v; want ErrIdentity", err)
	}
	if _, err := New(Rules{Members: []Identity{"bogus"}}); !errors.Is(err, ErrIdentity) {
		t.Errorf("New with a malformed member = %v; want ErrIdentity", err)
	}
}

func TestResolve(t *testing.T) {
	listed, err := New(Rules{
		Owners:  []Identity{"discord:1", "http:boss"},
		Members: []Identity{"discord:2", "http:alice", "discord:role:42"},
	})
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(Rules{Owners: []Identity{"discord:1"}, Everyone: true})
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := New(Rules{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		policy *Policy
		actor  Actor
		want   rtsandbox.Speaker
		tier   Tier
	}{
		{"owner", listed, Actor{Provider: "discord", Subject: "1", Name: "Ada"}, rtsandbox.Speaker{ID: "1", Name: "Ada", PrincipalID: "discord:1"}, Owner},
		{"http-owner", listed, Actor{Provider: "http", Subject: "boss", Name: "B"}, rtsandbox.Speaker{ID: "boss", Name: "B", PrincipalID: "http:boss"}, Owner},
		{"member-by-identity", listed, Actor{Provider: "discord", Subject: "2", Name: "Bo"}, rtsandbox.Speaker{ID: "2", Name: "Bo", PrincipalID: "discord:2"}, Member},
		{"member-by-role", listed, Actor{Provider: "discord", Subject: "3", Name: "Cy", Roles: []string{"discord:role:7", "discord:role:42"}}, rtsandbox.Speaker{ID: "3", Name: "Cy", PrincipalID: "discord:3"}, Member},
		{"owner-tier-never-from-role", listed, Actor{Provider: "discord", Subject: "4", Roles: []string{"discord:role:42"}}, rtsandbox.Speaker{ID: "4", PrincipalID: "discord:4"}, Member},
		{"other-surface-role-ignored", listed, Actor{Provider: "http", Subject: "x", Roles: []string{"discord:role:42"}}, rtsandbox.Speaker{}, None},
		{"same-subject-other-surface", listed, Actor{Provider: "http", Subject: "1"}, rtsandbox.Speaker{}, None},
		{"unlisted", listed, Actor{Provider: "discord", Subject: "9"}, rtsandbox.Speaker{}, None},
		{"bot-owner-never", listed, Actor{Provider: "discord", Subject: "1", Bot: true}, rtsandbox.Speaker{}, None},
		{"integration-never", open, Actor{Provider: "discord", Subject: "5", Integration: true}, rtsandbox.Speaker{}, None},
		{"everyone", open, Actor{Provider: "http", Subject: "zed", Name: "Z"}, rtsandbox.Speaker{ID: "zed", Name: "Z", PrincipalID: "http:zed"}, Member},
		{"everyone-owner-stays-owner", open, Actor{Provider: "discord", Subject: "1"}, rtsandbox.Speaker{ID: "1", PrincipalID: "discord:1"}, Owner},
		{"everyone-bad-subject", open, Actor{Provider: "http", Subject: "a b"}, rtsandbox.Speaker{}, None},
		{"everyone-role-shaped-subject", open, Actor{Provider: "discord", Subject: "role:1"}, rtsandbox.Speaker{}, None},
		{"empty-rules", nobody, Actor{Provider: "discord", Subject: "1"}, rtsandbox.Speaker{}, None},
		{"nil-policy", nil, Actor{Provider: "discord", Subject: "1"}, rtsandbox.Speaker{}, None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, tier := tt.policy.Resolve(tt.actor)
			if diff := cmp.Diff(tt.want, got); diff != "" || tier != tt.tier {
				t.Errorf("Resolve(%+v) = %+v, %v; want %+v, %v", tt.actor, got, tier, tt.want, tt.tier)
			}
			if tier != None {
				if err := got.Validate(); err != nil {
					t.Errorf("resolved speaker %+v does not validate: %v", got, err)
				}
			}
		})
	}
}

func FuzzParseIdentity(f *testing.F) {
	for _, tt := range identityTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseIdentity(s)
		if err != nil {
			if id != "" {
				t.Fatalf("ParseIdentity(%q) returned %q with error %v", s, id, err)
			}
			return
		}
		if string(id) != s || !utf8.ValidString(s) {
			t.Fatalf("ParseIdentity(%q) = %q", s, id)
		}
		if rtsandbox.UTF16Len(s) > rtsandbox.MaxSpeakerField {
			t.Fatalf("ParseIdentity(%q) accepted %d units", s, rtsandbox.UTF16Len(s))
		}
		if strings.ContainsFunc(id.Subject(), func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			t.Fatalf("ParseIdentity(%q) accepted whitespace or a control character", s)
		}
		if !rtsandbox.ChannelKey(s).Valid() {
			t.Fatalf("identity %q is not even key-shaped", s)
		}
		again, err := ParseIdentity(id.Provider() + ":" + id.Subject())
		if err != nil || again != id {
			t.Fatalf("round trip of %q = %q, %v", s, again, err)
		}
		if id.IsRole() != strings.HasPrefix(id.Subject(), "role:") {
			t.Fatalf("IsRole(%q) inconsistent", s)
		}
		// A resolvable user's speaker validates.
		if !id.IsRole() {
			p, _ := New(Rules{Everyone: true})
			sp, tier := p.Resolve(Actor{Provider: id.Provider(), Subject: id.Subject()})
			if tier != Member || sp.Validate() != nil {
				t.Fatalf("Resolve(%q) = %+v, %v", s, sp, tier)
			}
		}
	})
}
