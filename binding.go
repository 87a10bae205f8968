package rtsandbox

import (
	"regexp"
	"strings"
)

// kindRE is the one pattern of a kind: a channel key's prefix, a surface's
// key prefix and an identity's provider (docs/host.md, "Routing rules": a lowercase
// letter, then lowercase letters, digits, "_" and "-").
var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// ValidKind reports whether s is a valid kind: ^[a-z][a-z0-9_-]*$. Callers
// with a length rule of their own (identity providers: 32) add it.
func ValidKind(s string) bool { return kindRE.MatchString(s) }

// Kind is the key's kind, the part before the first colon ("discord" of
// "discord:1234"); "" when k has no colon.
func (k ChannelKey) Kind() string {
	kind, _, ok := strings.Cut(string(k), ":")
	if !ok {
		return ""
	}
	return kind
}

// LocalID is the key's id within its kind, everything after the first
// colon ("1234" of "discord:1234"); "" when k has no colon.
func (k ChannelKey) LocalID() string {
	_, id, _ := strings.Cut(string(k), ":")
	return id
}

// Tier is how much the access rules trust a speaker; higher is more.
type Tier int

const (
	// TierNone: the rules serve nobody by this author; no speaker.
	TierNone Tier = iota
	// TierMember may talk to the assistant.
	TierMember
	// TierOwner may also run owner commands.
	TierOwner
)

func (t Tier) String() string {
	switch t {
	case TierMember:
		return "member"
	case TierOwner:
		return "owner"
	}
	return "none"
}

// Binding is what the host admitted for one piece of work: the channel,
// the speaker and the speaker's tier, resolved by the router from the
// access rules. The broker binds every call of a turn to it; host tools,
// credential getters and delegation receive it; no request body can change
// it, and it never enters the container (the worker sees only the
// speaker's id and name, through the turn JSON).
type Binding struct {
	Channel ChannelKey
	Speaker Speaker
	Tier    Tier
}
