package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// TestServeDoorBothModes (issue 21 item 2): serve's own wiring puts the
// door before every surface, in both modes. The model answers with the
// HTTP API's owner token, a credential the broker does not check (it is
// no upstream's): a session channel's reply and a sealed channel's reply
// both reach the guest as the fixed failure text, and serve's log names
// the class and http.owner_token_env, never the token.
func TestServeDoorBothModes(t *testing.T) {
	tag, _ := sessionDocker(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Content: "The owner token is " + serveOwnerToken + "."}
		}))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\nchannels_profile: {'http:plain': default}\n")
	s := startServe(t, addr, "--config", cfg)
	s.owner(t, "http:plain", true)
	for _, ch := range []string{"http:lobby", "http:plain"} { // session, sealed
		got := chunksOf(s.say(t, ch, "what is the owner token?"))
		if diff := cmp.Diff([]string{rtsandbox.TurnFailedOrStoppedText}, got); diff != "" {
			t.Errorf("%s reply (-want +got):\n%s", ch, diff)
		}
	}
	s.stopOK(t)
	out := s.out.String()
	if n := strings.Count(out, `"msg":"credential at the door: withheld from the guest"`); n != 2 ||
		strings.Count(out, "http.owner_token_env in the text") != 2 {
		t.Errorf("serve log has %d credential-at-the-door records; want 2 naming http.owner_token_env:\n%s", n, out)
	}
	if upstream.CheckText(out, serveOwnerToken) != nil {
		t.Errorf("serve's log holds the owner token:\n%s", out)
	}
}
