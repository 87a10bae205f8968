package router

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// TestSandboxTurnCarriesResolvedTier: the runtime receives the tier the
// access rules resolved for the author, in the turn's Binding. A member
// who calls themselves "Owner" stays a member: the tier comes from the
// resolver, never from a name.
func TestSandboxTurnCarriesResolvedTier(t *testing.T) {
	store := openStore(t, filepath.Join(t.TempDir(), "state"), guests)
	h := newHarness(t, store)
	for _, m := range []Message{
		mention(guests, "alice", "Owner", "as a member named Owner"),
		mention(guests, "owner", "Owner", "as the owner"),
	} {
		if err := h.handle(t, m); err != nil {
			t.Fatal(err)
		}
	}
	want := []rtsandbox.Binding{
		{Channel: guests, Speaker: rtsandbox.Speaker{ID: "alice", Name: "Owner", PrincipalID: "p_alice"}, Tier: rtsandbox.TierMember},
		{Channel: guests, Speaker: rtsandbox.Speaker{ID: "owner", Name: "Owner", PrincipalID: "owner"}, Tier: rtsandbox.TierOwner},
	}
	if diff := cmp.Diff(want, h.rt.Bindings()); diff != "" {
		t.Errorf("runtime bindings (-want +got):\n%s", diff)
	}
}
