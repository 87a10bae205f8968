package discord_test

import (
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"

	"github.com/rtsandbox/rtsandbox/surface/discord"
)

// TestCommandDescriptionsNameNoMode: the slash commands are global, so a
// session channel shows the same descriptions as a sealed one; none may
// promise one mode ("Stop the running sealed turn" in a session channel).
func TestCommandDescriptionsNameNoMode(t *testing.T) {
	var walk func(opts []*discordgo.ApplicationCommandOption)
	check := func(name, desc string) {
		if desc == "" {
			t.Errorf("%s has no description", name)
		}
		for _, mode := range []string{"sealed", "session"} {
			if strings.Contains(strings.ToLower(desc), mode) {
				t.Errorf("%s: description %q names the %s mode", name, desc, mode)
			}
		}
	}
	walk = func(opts []*discordgo.ApplicationCommandOption) {
		for _, o := range opts {
			check(o.Name, o.Description)
			walk(o.Options)
		}
	}
	for _, c := range discord.Commands("rt") {
		check(c.Name, c.Description)
		walk(c.Options)
	}
}
