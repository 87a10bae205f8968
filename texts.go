package rtsandbox

// Every fixed text a guest or an owner sees, once (docs/session-mode.md, "Owner commands per mode"; docs/host.md, "Routing rules"). Surfaces, the router and the runtimes point here; a text that
// changes here changes everywhere. Texts starting with "-# " are Discord
// subtext notices; other surfaces show them as they are.

// Texts of a sandbox turn, posted in the channel.
const (
	// TurnFailedText answers a worker reply with ok false.
	TurnFailedText = "The sandbox turn failed."
	// TurnFailedOrStoppedText answers a turn that was refused, failed,
	// timed out or was stopped.
	TurnFailedOrStoppedText = "The sandbox turn failed or was stopped."
	// BusyText answers a turn that found no free slot on the host within
	// the queue wait (sandbox.max_queue_wait).
	BusyText = "-# This assistant is busy right now; please send this again in a minute."
	// BudgetText answers a turn refused, or cut short, because a daily
	// budget (calls, tokens or turn seconds of the speaker, the channel or
	// the installation) is spent. Which one is for the operator log only.
	BudgetText = "-# This assistant has reached its daily limit here; please try again tomorrow."
	// RestartingText answers, once per channel, messages that arrive while
	// the host shuts down.
	RestartingText = "-# This assistant is restarting and takes no new messages right now; please send this again in a few minutes."
	// SandboxStoppedText answers a session turn whose container stopped
	// serving while it ran (killed, crashed, removed, paused or
	// restarted); the channel's next turn gets a working sandbox and the
	// conversation so far.
	SandboxStoppedText = "-# The sandbox stopped during this turn; please send this again."
	// QueueFullText answers a message beyond the channel's queue bound.
	QueueFullText = "-# Too many messages are waiting in this channel; please send this again when the current ones are answered."
	// WorkspaceFullText answers a session turn refused because the
	// channel's workspace is over its disk bound; the owner's fresh
	// frees it.
	WorkspaceFullText = "-# This channel's sandbox workspace is full, so the turn did not run. The owner can free it with fresh."
	// StoreText answers a turn refused because the host could not write
	// its usage database and its policy (budgets.on_store_error: deny)
	// takes no turn it cannot count; which file is for the operator log.
	StoreText = "-# This assistant cannot keep its records right now, so the turn did not run; please send this again in a few minutes."
	// ReplyCutNotice ends the last chunk of a reply that did not fit in
	// the bounded number of messages, as a paragraph of its own.
	ReplyCutNotice = "-# [reply cut: it was too long to post in full]"
	// FileTooLargeFormat names (%s, the reply file's safe name, escaped
	// by the surface for its markup) a reply file the surface could not
	// post because it is larger than the channel's upload limit.
	FileTooLargeFormat = "-# The file %s was not posted: it is larger than this server's upload limit."
)

// Owner command answers (docs/session-mode.md, "Owner commands per mode"). Surfaces show them to the
// issuer only (Discord: ephemeral). Both enabled texts begin with
// EnabledPrefix, which surfaces read as "enabled" (EnabledTextFor picks
// the one of the channel's mode). DisabledText is ours: the reference's
// "normal host routing applies again" promised a host that rtsandbox,
// standalone, does not have; a switched-off channel's messages are
// dropped.
const (
	EnabledPrefix      = "Sandbox routing is enabled."
	EnabledText        = EnabledPrefix + " Mention the bot or reply to it to start a sealed turn."
	EnabledSessionText = EnabledPrefix + " Mention the bot or reply to it to continue this channel's session."
	DisabledText       = "Sandbox routing is disabled. Memory is retained; messages here are no longer answered."
	NotOwnerText       = "Owner only: sandbox commands are the control panel of this assistant's owner."
	NeedsChannelText   = "Sandbox commands require a guild channel."
	UnknownActionText  = "Unknown sandbox command. Use on, off, status, fresh or stop."
	FreshText          = "The next sandbox turn in this channel starts a fresh conversation. Memory is kept."
	NotOwnedText       = "This channel is not sandboxed."
	StoppedText        = "Stopped the running sandbox turn."
	IdleText           = "No sandbox turn is running in this channel."
	CommandFailedText  = "That did not finish; try again later. The details are in the log."
	QueuedText         = "Queued: this applies once the channel's running turns finish."
	DiskFullText       = "The host's disk is full: the change was not saved. Free some space and try again."
	// SealedStatusFormat and SessionStatusFormat are the status command's
	// line about the channel's runtime, after EnabledText or DisabledText:
	// the profile's name, and in session mode the container's state
	// (missing, running, stopped, or unknown when the engine did not
	// answer). Profile names are the operator's, checked by the config.
	SealedStatusFormat  = "Mode: sealed (a fresh container every turn). Profile: %s."
	SessionStatusFormat = "Mode: session (one long-lived container). Profile: %s. Container: %s."
	// WorkspaceStatusFormat is a session channel's workspace against its
	// disk bound: the bound's mode, bytes used and bound (MiB), entries
	// used and bound; WorkspaceFullStatus follows it when turns are
	// refused, WorkspaceUnmountedStatus replaces it for a hard workspace
	// not mounted now.
	WorkspaceStatusFormat    = "Workspace (%s bound): %.1f of %.0f MiB, %d of %d files used."
	WorkspaceFullStatus      = " Full: turns are refused until the owner runs fresh."
	WorkspaceUnmountedStatus = "Workspace (hard bound): not mounted; measured at the channel's next turn."
)

// Texts of the terminal chat (rtsandbox chat).
const (
	ConsoleHelpText = "Type a message and press Enter. /fresh forgets the history, /quit leaves."
)

// Texts of a session turn's attachments (docs/session.md, "Attachments in, reply files out"). When the host
// refused a file of a message, or kept an image from the model, the reply
// ends with AttachmentsNoticeText and one line per file, whatever the
// model answered: the guest learns it from the host, not from a model that
// may leave it out. A line names the file by its position (1-based, the
// replied-to message's counted apart), never by its guest-chosen name.
const (
	// AttachmentsUnsupportedText ends a sealed turn's model input when the
	// message had files of its own (TurnInput.SealedText): the sealed mode
	// takes no attachments, and the model says so.
	AttachmentsUnsupportedText = "[Attachments are not supported in this sandbox.]"
	AttachmentsNoticeText      = "-# Some attachments were not used:"
	// AttachmentLineFormat is one line: the position, AttachmentOfReference
	// or "", and the reason.
	AttachmentLineFormat = "-# attachment %d%s: %s"
	// AttachmentRangeFormat collapses the attachments past the limit: the
	// first and last position, AttachmentOfReference or "", the reason.
	AttachmentRangeFormat = "-# attachments %d to %d%s: %s"
	AttachmentOfReference = " of the replied-to message"

	// The reasons that name a limit are formats of it (MaxAttachments,
	// MaxAttachmentBytes and MaxAttachmentsTotal in MB), so the number is
	// written once (attach.Reason.GuestText fills them in).
	AttachTooManyFormat  = "more than %d attachments on one message"
	AttachTooLargeFormat = "larger than %d MB"
	AttachTotalFormat    = "the attachments exceed %d MB in total"
	AttachNotImageReason = "not a real PNG, JPEG, GIF or WebP image, whatever its name or type says"
	AttachEmptyReason    = "empty"
	AttachDownloadReason = "could not be downloaded"
	AttachStoreReason    = "could not be stored"
	// AttachNoRoomReason: the channel's workspace keeps room for its
	// turns, and the file would take it (session/disk_room.go).
	AttachNoRoomReason = "the channel's workspace is full; the owner can free it with fresh"
	// The file was saved but is not shown to the model as an image: the
	// formats of MaxImages, MaxImagesTotal and MaxImageBytes (in MB).
	AttachImageLimitFormat = "saved, but not shown as an image: at most %d images (%d MB) per message"
	AttachImageSizeFormat  = "saved, but not shown as an image: larger than %d MB"
)

// EnabledTextFor is the enabled text of a channel whose runtime runs in
// mode: EnabledSessionText in session mode, else EnabledText (the sealed
// mode's, and the answer when the mode is not known).
func EnabledTextFor(mode string) string {
	if mode == ModeSession {
		return EnabledSessionText
	}
	return EnabledText
}
