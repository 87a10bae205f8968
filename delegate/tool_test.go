package delegate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

// TestOwnerLookalikeMemberDelegatesAsMember is the regression test for a
// member dressed as an owner: a principal spelled like an owner identity,
// or a display name equal to an owner's name, must not change the tier.
// The tool takes the tier from the Binding the router resolved and parses
// no string; so each lookalike below delegates as the member it is, and a
// binding's owner or none tier is refused whatever the principal says.
func TestOwnerLookalikeMemberDelegatesAsMember(t *testing.T) {
	owner := rtsandbox.Speaker{ID: "1001", Name: "Olivia", PrincipalID: "discord:1001"}
	for _, tc := range []struct {
		name    string
		binding rtsandbox.Binding
		want    []Author // the authors of started jobs; nil: refused
	}{
		{
			name:    "principal-resembles-owner-identity",
			binding: rtsandbox.Binding{Channel: channel, Speaker: rtsandbox.Speaker{ID: "2002", Name: "Mallory", PrincipalID: "discord:1001 "}, Tier: access.Member},
			want:    []Author{{PrincipalID: "discord:1001 ", ID: "2002", Name: "Mallory", Tier: access.Member}},
		},
		{
			name:    "principal-equals-owner-identity-text",
			binding: rtsandbox.Binding{Channel: channel, Speaker: rtsandbox.Speaker{ID: "2002", Name: "Mallory", PrincipalID: "DISCORD:1001"}, Tier: access.Member},
			want:    []Author{{PrincipalID: "DISCORD:1001", ID: "2002", Name: "Mallory", Tier: access.Member}},
		},
		{
			name:    "name-is-owner-name",
			binding: rtsandbox.Binding{Channel: channel, Speaker: rtsandbox.Speaker{ID: "2002", Name: owner.Name, PrincipalID: "discord:2002"}, Tier: access.Member},
			want:    []Author{{PrincipalID: "discord:2002", ID: "2002", Name: owner.Name, Tier: access.Member}},
		},
		{
			name:    "owner-tier-refused",
			binding: rtsandbox.Binding{Channel: channel, Speaker: owner, Tier: access.Owner},
		},
		{
			name:    "owner-principal-with-no-tier-refused",
			binding: rtsandbox.Binding{Channel: channel, Speaker: owner, Tier: access.None},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			d := mustNew(t, Options{Target: "guest", Deliver: rec.deliver, Run: func(context.Context, string, RunContext) (string, error) {
				return "report", nil
			}})
			tool := &Tool{Delegator: d, Target: "guest"}
			answer, err := tool.Run(context.Background(), json.RawMessage(`{"title":"t","task":"a task"}`), tc.binding)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if err := d.Idle(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []Author
			for _, j := range rec.jobs {
				got = append(got, j.Author)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("started jobs' authors (-want +got):\n%s\nanswer: %q", diff, answer)
			}
			if started := strings.HasPrefix(answer, "Research #1 started."); started != (tc.want != nil) {
				t.Errorf("answer = %q", answer)
			}
		})
	}
}
