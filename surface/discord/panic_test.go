package discord_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/discord"
)

// brokenRouter panics on a message or command that says "explode" (or
// whose action is status), as a bug on the inbound path would.
type brokenRouter struct{ discord.Router }

func (b brokenRouter) Submit(m router.Message) (<-chan error, error) {
	if strings.Contains(m.Text, "explode") {
		panic("cannot route " + m.Text)
	}
	return b.Router.Submit(m)
}

func (b brokenRouter) Command(ctx context.Context, c router.Command) (string, error) {
	if c.Action == router.ActionStatus {
		panic("cannot run " + c.Action)
	}
	return b.Router.Command(ctx, c)
}

// discordgo does not recover handler panics: a panic on the inbound path
// must fail that message or command only, and the surface keeps serving.
func TestPanicOnInboundPathDoesNotKillSurface(t *testing.T) {
	t.Parallel()
	h := newWrappedHarness(t, func(r discord.Router) discord.Router { return brokenRouter{r} })

	h.post(t, guildMessage(enabledID, alice, []string{memberRole}, "explode secret-words", true))
	h.post(t, guildMessage(enabledID, alice, []string{memberRole}, "hello", true))
	calls := h.waitFor(t, "the reply to the next message", func(c []fakediscord.Call) bool {
		return count(c, "POST", messagesPath(enabledID)) == 1
	})
	if got := sentContents(t, calls, enabledID); !cmp.Equal(got, []string{"Sealed."}) {
		t.Errorf("replies = %q; want only the next message's", got)
	}

	// A command whose router call panics gets no edit; the next one does.
	h.slash(t, guild, enabledID, owner, nil, router.ActionStatus)
	for deadline := time.Now().Add(wait); !strings.Contains(h.logs.String(), `"where":"owner command"`); {
		if time.Now().After(deadline) {
			t.Fatalf("the panicking command was not recovered within %v:\n%s", wait, h.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if text, _ := h.answer(t, h.slash(t, guild, enabledID, owner, nil, router.ActionOn)); text != rtsandbox.EnabledText {
		t.Errorf("on after a panicking command = %q; want %q", text, rtsandbox.EnabledText)
	}

	logs := h.logs.String()
	for _, where := range []string{`"where":"inbound message"`, `"where":"owner command"`} {
		if !strings.Contains(logs, where) {
			t.Errorf("no recovered panic logged at %s:\n%s", where, logs)
		}
	}
	if !strings.Contains(logs, `"channel":"`+string(enabled)+`"`) {
		t.Errorf("the panic was not logged with its channel key")
	}
	if strings.Contains(logs, "secret-words") {
		t.Errorf("the message text was logged:\n%s", logs)
	}
}
