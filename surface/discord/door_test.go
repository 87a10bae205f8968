package discord_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/discord"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// TestDoorNothingLeavesDiscord (issue 21 item 2): the bot's own token, a
// credential of the host, planted in a turn's preview (base64), its reply
// (raw), its file (hex in the bytes) and a research report, reaches
// Discord in no form: the channel gets the fixed failure text and no
// file, and the operator log names the class and the credential's key.
func TestDoorNothingLeavesDiscord(t *testing.T) {
	refused := make(chan router.DeliveryKind, 8)
	var mu sync.Mutex
	var kinds []string
	h := buildHarness(t, harnessConfig{
		edit: func(o *discord.Options) { o.Preview = true },
		door: door.New([]door.Secret{{Name: "discord.token_env", Read: func() rtsandbox.Secret { return token }}}),
		onDoor: func(_ rtsandbox.ChannelKey, k router.DeliveryKind) {
			mu.Lock()
			kinds = append(kinds, string(k))
			mu.Unlock()
			refused <- k
		},
	})
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		c.OnText(1, "Hello ")
		h.waitFor(t, "the first preview", func(c []fakediscord.Call) bool { return find(c, "POST", messagesPath(enabledID)) >= 0 })
		c.OnText(1, "the token is "+base64.StdEncoding.EncodeToString([]byte(token)))
		select { // the second preview, refused at the door
		case <-refused:
		case <-time.After(wait):
		}
		return rtsandbox.Reply{OK: true, Text: "Here it is: " + token}, nil
	}
	h.rt.Files = func(turnCall) []rtsandbox.File {
		return []rtsandbox.File{{Name: "token.txt", Data: []byte(hex.EncodeToString([]byte(token)))}}
	}
	h.post(t, guildMessage(enabledID, alice, []string{memberRole}, "what is your token?", true))
	h.waitFor(t, "the reply", func(c []fakediscord.Call) bool { return count(c, "POST", messagesPath(enabledID)) == 2 })
	if err := h.router.PostReport(context.Background(), enabled, "Research report: "+token); err != nil {
		t.Fatal(err)
	}
	calls := h.waitFor(t, "the report", func(c []fakediscord.Call) bool { return count(c, "POST", messagesPath(enabledID)) == 3 })

	var sent strings.Builder
	for _, c := range calls {
		sent.Write(c.Body)
		for _, f := range c.Files {
			sent.WriteString(f.Name)
			sent.Write(f.Data)
		}
	}
	if err := upstream.CheckText(sent.String(), token); err != nil {
		t.Fatalf("Discord got the token:\n%s", sent.String())
	}
	ps := posts(t, calls, enabledID)
	if len(ps) != 3 || ps[0].Content != "Hello " || ps[1].Content != rtsandbox.TurnFailedOrStoppedText || len(ps[1].Files) != 0 ||
		ps[2].Content != rtsandbox.TurnFailedOrStoppedText {
		t.Errorf("posts %+v; want the first preview, then the failure text twice and no file", ps)
	}
	mu.Lock()
	if strings.Join(kinds, " ") != "preview reply report" {
		t.Errorf("refused %v; want preview reply report", kinds)
	}
	mu.Unlock()
	logs := h.logs.String()
	if !strings.Contains(logs, `"msg":"credential at the door: withheld from the guest"`) || !strings.Contains(logs, `"class":"credential at the door"`) ||
		!strings.Contains(logs, "discord.token_env") {
		t.Errorf("the log has no credential-at-the-door record naming discord.token_env:\n%s", logs)
	}
	// The harness's own cleanup fails the test if the token is in the log.
}
