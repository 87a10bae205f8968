package discord

import (
	"context"
	"errors"
	"fmt"

	"github.com/bwmarrin/discordgo"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Group is the subcommand group of the owner commands under the root.
const Group = "sandbox"

// actionDescriptions describe the subcommands, in router.Actions() order.
// Commands are global, not per channel, so no description names a mode
// (sealed or session): a channel of either mode shows the same ones.
var actionDescriptions = map[string]string{
	router.ActionOn:     "Route mentions and replies to the sandboxed agent",
	router.ActionOff:    "Disable sandbox routing; keep channel memory",
	router.ActionStatus: "Show whether this channel is sandboxed",
	router.ActionFresh:  "Start this channel's conversation over; keep memory",
	router.ActionStop:   "Stop the running turn in this channel",
}

// Commands returns the application commands the surface registers: the
// root with the sandbox group, usable in guilds and the bot's DMs (a DM
// gets the router's "requires a guild channel" text).
func Commands(root string) []*discordgo.ApplicationCommand {
	subs := make([]*discordgo.ApplicationCommandOption, 0, len(router.Actions()))
	for _, a := range router.Actions() {
		subs = append(subs, &discordgo.ApplicationCommandOption{
			Type: discordgo.ApplicationCommandOptionSubCommand, Name: a, Description: actionDescriptions[a],
		})
	}
	contexts := []discordgo.InteractionContextType{discordgo.InteractionContextGuild, discordgo.InteractionContextBotDM}
	install := []discordgo.ApplicationIntegrationType{discordgo.ApplicationIntegrationGuildInstall}
	return []*discordgo.ApplicationCommand{{
		Type:             discordgo.ChatApplicationCommand,
		Name:             root,
		Description:      "Control panel of this assistant (owner only)",
		Contexts:         &contexts,
		IntegrationTypes: &install,
		Options: []*discordgo.ApplicationCommandOption{{
			Type:        discordgo.ApplicationCommandOptionSubCommandGroup,
			Name:        Group,
			Description: "Manage this channel's sandboxed guest agent",
			Options:     subs,
		}},
	}}
}

func (s *Surface) registerCommands(ctx context.Context, sess *discordgo.Session, appID string) error {
	if _, err := sess.ApplicationCommandBulkOverwrite(appID, "", Commands(s.root), discordgo.WithContext(ctx)); err != nil {
		return fmt.Errorf("discord: register the owner commands: %s", s.redact(err))
	}
	return nil
}

// onInteraction runs on discordgo's gateway reader: it hands an owner
// command to its own goroutine, since the command may wait on the channel
// queue.
func (s *Surface) onInteraction(_ *discordgo.Session, ic *discordgo.InteractionCreate) {
	if ic == nil || ic.Interaction == nil || ic.Type != discordgo.InteractionApplicationCommand {
		return
	}
	defer s.recovered("interaction event", key(ic.ChannelID))
	action, ok := s.action(ic.Interaction)
	if !ok {
		return // not ours; no other command is registered by this host
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.session == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.recovered("owner command", key(ic.ChannelID))
		s.command(ic.Interaction, action)
	}()
}

// action returns the subcommand of `/<root> sandbox <action>`. An unknown
// action is passed on for the router to refuse with its fixed text.
func (s *Surface) action(i *discordgo.Interaction) (string, bool) {
	data, ok := i.Data.(discordgo.ApplicationCommandInteractionData)
	if !ok || data.Name != s.root || len(data.Options) != 1 {
		return "", false
	}
	g := data.Options[0]
	if g == nil || g.Type != discordgo.ApplicationCommandOptionSubCommandGroup || g.Name != Group || len(g.Options) != 1 || g.Options[0] == nil {
		return "", false
	}
	return g.Options[0].Name, true
}

// command answers one owner command: a deferred ephemeral response at
// once, then the router's text as its edit.
func (s *Surface) command(i *discordgo.Interaction, action string) {
	sess, err := s.rest()
	if err != nil {
		return
	}
	ch := key(i.ChannelID)
	ackCtx, cancel := context.WithTimeout(s.ctx, ackTimeout)
	err = sess.InteractionRespond(i, &discordgo.InteractionResponse{
		Type: discordgo.InteractionResponseDeferredChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Flags: discordgo.MessageFlagsEphemeral},
	}, discordgo.WithContext(ackCtx))
	cancel()
	if err != nil {
		s.log.Error("could not acknowledge an owner command", "channel", ch, "action", action, "err", s.redact(err, i.Token))
		return
	}

	c := router.Command{Channel: ch, Direct: i.GuildID == "", Action: action, Author: commandAuthor(i)}
	waitCtx, cancel := context.WithTimeout(s.ctx, commandWait)
	text, err := s.router.Command(waitCtx, c)
	cancel()
	switch {
	case errors.Is(err, router.ErrNotOwner):
		s.log.Info("owner command refused: not an owner", "channel", ch, "action", action, "user", c.Author.ID)
	case errors.Is(err, rtsandbox.ErrRefused), errors.Is(err, router.ErrUnknownAction):
		s.log.Info("owner command refused", "channel", ch, "action", action, "user", c.Author.ID, "err", err)
	case err != nil:
		s.log.Warn("owner command did not finish", "channel", ch, "action", action, "err", err)
	default:
		s.log.Info("owner command done", "channel", ch, "action", action, "user", c.Author.ID)
	}

	// Detached from Close: the owner still learns what happened.
	editCtx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), editTimeout)
	defer cancel()
	edit := &discordgo.WebhookEdit{Content: &text, AllowedMentions: &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}}
	if _, err := sess.InteractionResponseEdit(i, edit, discordgo.WithContext(editCtx)); err != nil {
		s.log.Error("could not answer an owner command", "channel", ch, "action", action, "err", s.redact(err, i.Token))
	}
}

// commandAuthor is the issuer: the member's user in a guild, the user in a
// DM.
func commandAuthor(i *discordgo.Interaction) router.Author {
	u, mem := i.User, i.Member
	if mem != nil && mem.User != nil {
		u = mem.User
	}
	if u == nil {
		return router.Author{}
	}
	return router.Author{ID: u.ID, Name: displayName(u, mem), Roles: roles(mem), Bot: u.Bot}
}
