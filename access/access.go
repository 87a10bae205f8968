// Package access decides who may talk to the assistant: it resolves a chat
// author to a speaker and a tier from the operator's static access rules.
//
// The rules (docs/host.md, "Access", without a database):
//
//   - An identity is "<provider>:<subject>", such as "discord:123" or
//     "http:alice". A role is "<provider>:role:<id>", such as
//     "discord:role:42"; it can only grant the member tier.
//   - The owner tier comes only from the owners list, never from a role.
//   - Members are either everyone (every surface) or a list of identities
//     and roles.
//   - Bots and integrations (webhooks) never resolve, whatever the rules say.
//   - A resolved speaker's principal id is its full identity string, so the
//     same subject on two surfaces ("discord:1", "http:1") are two people.
package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
)

// ErrIdentity marks a malformed identity or role string.
var ErrIdentity = fmt.Errorf("%w: identity", rtsandbox.ErrInvalid)

// rolePrefix marks a role subject: "discord:role:<id>".
const rolePrefix = "role:"

// MaxProviderLen bounds an identity's provider, a kind (rtsandbox.ValidKind).
const MaxProviderLen = 32

// validProvider is the root's kind rule with the identity length bound.
func validProvider(s string) bool { return len(s) <= MaxProviderLen && rtsandbox.ValidKind(s) }

// Identity is a validated "<provider>:<subject>" or role string. The zero
// value is not valid; build identities with ParseIdentity, User or Role.
type Identity string

// ParseIdentity checks s: a provider matching ^[a-z][a-z0-9_-]{0,31}$, a
// colon, and a subject of printable characters without whitespace. The
// whole string is at most 256 UTF-16 units, the limit of a speaker's
// principal id. A role ("<provider>:role:<id>") needs a non-empty id.
// Errors wrap ErrIdentity.
func ParseIdentity(s string) (Identity, error) {
	provider, subject, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return "", fmt.Errorf("%w %q: want <provider>:<subject>", ErrIdentity, s)
	case !validProvider(provider):
		return "", fmt.Errorf("%w %q: provider must match ^[a-z][a-z0-9_-]{0,31}$", ErrIdentity, s)
	case subject == "":
		return "", fmt.Errorf("%w %q: empty subject", ErrIdentity, s)
	case strings.IndexFunc(subject, badSubjectRune) >= 0:
		return "", fmt.Errorf("%w %q: subject has whitespace or control characters", ErrIdentity, s)
	case rtsandbox.UTF16Len(s) > rtsandbox.MaxSpeakerField:
		return "", fmt.Errorf("%w: longer than %d UTF-16 units", ErrIdentity, rtsandbox.MaxSpeakerField)
	case subject == rolePrefix[:len(rolePrefix)-1] || subject == rolePrefix:
		return "", fmt.Errorf("%w %q: empty role id", ErrIdentity, s)
	}
	return Identity(s), nil
}

// badSubjectRune refuses whitespace, controls and invalid UTF-8 (which
// ranges over as U+FFFD) so an identity prints and compares unambiguously.
func badSubjectRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar ||
		unicode.Is(unicode.Cf, r)
}

// User builds the identity of a person on provider.
func User(provider, subject string) (Identity, error) {
	if strings.HasPrefix(subject, rolePrefix) {
		return "", fmt.Errorf("%w: a user subject must not start with %q", ErrIdentity, rolePrefix)
	}
	return ParseIdentity(provider + ":" + subject)
}

// Role builds the identity of a role on provider, such as
// Role("discord", "42") = "discord:role:42".
func Role(provider, id string) (Identity, error) {
	return ParseIdentity(provider + ":" + rolePrefix + id)
}

// Provider returns the part before the first colon.
func (id Identity) Provider() string { p, _, _ := strings.Cut(string(id), ":"); return p }

// Subject returns the part after the first colon.
func (id Identity) Subject() string { _, s, _ := strings.Cut(string(id), ":"); return s }

// IsRole reports whether id names a role rather than a person.
func (id Identity) IsRole() bool { return strings.HasPrefix(id.Subject(), rolePrefix) }

// String returns id as written.
func (id Identity) String() string { return string(id) }

// Tier is how much the access rules trust a speaker: the root's Tier.
type Tier = rtsandbox.Tier

// The tiers, named as the access rules use them.
const (
	// None: the rules serve nobody by this author; no speaker.
	None = rtsandbox.TierNone
	// Member may talk to the assistant.
	Member = rtsandbox.TierMember
	// Owner may also run owner commands.
	Owner = rtsandbox.TierOwner
)

// Rules are the configured access rules.
type Rules struct {
	// Owners are people (no roles). The first is the primary owner.
	Owners []Identity
	// Everyone makes every author on every surface a member.
	Everyone bool
	// Members are people and roles; ignored when Everyone is set.
	Members []Identity
}

// Validate checks every identity again (Rules may be built by hand) and
// that no owner is a role. Errors wrap ErrIdentity.
func (r Rules) Validate() error {
	var errs []error
	for _, o := range r.Owners {
		if _, err := ParseIdentity(string(o)); err != nil {
			errs = append(errs, fmt.Errorf("owner: %w", err))
		} else if o.IsRole() {
			errs = append(errs, fmt.Errorf("%w %q: the owner tier never comes from a role", ErrIdentity, o))
		}
	}
	for _, m := range r.Members {
		if _, err := ParseIdentity(string(m)); err != nil {
			errs = append(errs, fmt.Errorf("member: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Actor is what a surface knows about a message's author.
type Actor struct {
	Provider string   // the surface prefix, such as "discord"
	Subject  string   // the surface's id of the author
	Name     string   // display name as the surface shows it
	Roles    []string // role identities, such as "discord:role:42"; nil when unknown (DMs)
	// Bot and Integration authors never resolve.
	Bot, Integration bool
}

// Policy resolves actors under fixed Rules. It is immutable and safe for
// concurrent use.
type Policy struct {
	owners   []Identity
	everyone bool
	members  []Identity
}

// New checks rules and returns their policy. Errors wrap ErrIdentity.
func New(rules Rules) (*Policy, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	return &Policy{
		owners:   slices.Clone(rules.Owners),
		everyone: rules.Everyone,
		members:  slices.Clone(rules.Members),
	}, nil
}

// Resolve returns the speaker and tier for a, or the zero Speaker and None
// when the rules serve nobody by a (including every bot, integration and
// author whose identity is malformed). The speaker's name is the surface's
// display name; its principal id is the identity string.
func (p *Policy) Resolve(a Actor) (rtsandbox.Speaker, Tier) {
	if p == nil || a.Bot || a.Integration {
		return rtsandbox.Speaker{}, None
	}
	id, err := User(a.Provider, a.Subject)
	if err != nil {
		return rtsandbox.Speaker{}, None
	}
	tier := p.tier(id, a.Roles)
	if tier == None {
		return rtsandbox.Speaker{}, None
	}
	return rtsandbox.Speaker{ID: a.Subject, Name: a.Name, PrincipalID: string(id)}, tier
}

// tier is the highest tier id qualifies for. Roles count only for members
// and only when they belong to id's own provider, so a surface cannot
// claim another surface's roles.
func (p *Policy) tier(id Identity, roles []string) Tier {
	if slices.Contains(p.owners, id) {
		return Owner
	}
	if p.everyone || slices.Contains(p.members, id) {
		return Member
	}
	for _, r := range roles {
		role := Identity(r)
		if role.IsRole() && role.Provider() == id.Provider() && slices.Contains(p.members, role) {
			return Member
		}
	}
	return None
}
