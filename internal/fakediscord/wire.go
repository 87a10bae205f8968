package fakediscord

import "encoding/json"

// Wire shapes, written from Discord's API documentation (gateway v9/v10,
// REST v9/v10). Only the fields the host reads or tests set are present;
// Discord sends many more, and clients must ignore what they do not know.

// User is a Discord user object.
type User struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name,omitempty"`
	Bot        bool   `json:"bot,omitempty"`
}

// Member is a partial guild member object as MESSAGE_CREATE carries it
// (no user) or as an interaction carries it (with user).
type Member struct {
	Nick  string   `json:"nick,omitempty"`
	Roles []string `json:"roles"`
	User  *User    `json:"user,omitempty"`
}

// Attachment is a message attachment object.
type Attachment struct {
	ID          string `json:"id"`
	Filename    string `json:"filename"`
	Size        int    `json:"size"`
	URL         string `json:"url"`
	ContentType string `json:"content_type,omitempty"`
}

// Reference types of MessageReference.Type.
const (
	ReferenceDefault = 0 // a reply
	ReferenceForward = 1
)

// Message types the host cares about.
const (
	TypeDefault = 0
	TypeReply   = 19
	TypeJoin    = 7 // a system message
)

// MessageReference is a message reference object.
type MessageReference struct {
	Type      int    `json:"type"`
	MessageID string `json:"message_id,omitempty"`
	ChannelID string `json:"channel_id,omitempty"`
	GuildID   string `json:"guild_id,omitempty"`
}

// Snapshot is one entry of message_snapshots (a forward's copy).
type Snapshot struct {
	Message SnapshotMessage `json:"message"`
}

// SnapshotMessage is the partial message inside a snapshot.
type SnapshotMessage struct {
	Type        int          `json:"type"`
	Content     string       `json:"content"`
	Attachments []Attachment `json:"attachments"`
	Timestamp   string       `json:"timestamp"`
}

// Message is a message object. MESSAGE_CREATE adds guild_id and member to
// it; a REST GET answers without them.
type Message struct {
	ID                string            `json:"id"`
	ChannelID         string            `json:"channel_id"`
	GuildID           string            `json:"guild_id,omitempty"`
	Type              int               `json:"type"`
	Content           string            `json:"content"`
	Author            User              `json:"author"`
	Member            *Member           `json:"member,omitempty"`
	Mentions          []User            `json:"mentions"`
	MentionRoles      []string          `json:"mention_roles"`
	MentionEveryone   bool              `json:"mention_everyone"`
	Attachments       []Attachment      `json:"attachments"`
	Embeds            []json.RawMessage `json:"embeds"`
	WebhookID         string            `json:"webhook_id,omitempty"`
	MessageReference  *MessageReference `json:"message_reference,omitempty"`
	ReferencedMessage *Message          `json:"referenced_message,omitempty"`
	MessageSnapshots  []Snapshot        `json:"message_snapshots,omitempty"`
	Timestamp         string            `json:"timestamp"`
	EditedTimestamp   *string           `json:"edited_timestamp"`
	Flags             int               `json:"flags"`
}

// Slash is an owner slash command invocation, `/<Root> <Group> <Sub>`.
// An empty GuildID makes it a bot DM (interaction context 1, user instead
// of member).
type Slash struct {
	GuildID, ChannelID string
	User               User
	Roles              []string // member roles (guild only)
	Nick               string
	Root, Group, Sub   string
}

// Interaction identifies a dispatched interaction; its callback and edit
// are recorded under these.
type Interaction struct {
	ID, Token string
}

// Gateway opcodes.
const (
	opDispatch     = 0
	opHeartbeat    = 1
	opIdentify     = 2
	opResume       = 6
	opHello        = 10
	opHeartbeatAck = 11
)

// frame is one gateway payload.
type frame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int64          `json:"s"`
	T  *string         `json:"t"`
}

// Identify is the d of an Identify (op 2) as the fake records it. Token
// is compared, never recorded.
type Identify struct {
	Intents    int  `json:"intents"`
	Compress   bool `json:"compress"`
	Properties struct {
		OS      string `json:"os"`
		Browser string `json:"browser"`
	} `json:"properties"`
}

type identifyIn struct {
	Identify
	Token string `json:"token"`
}
