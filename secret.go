package rtsandbox

import "log/slog"

// Secret is a credential read from the host for one use. It prints and logs
// as "[redacted]" so that a secret passed to fmt or slog by mistake does not
// leak; call Reveal at the one place the value is needed (an outgoing
// Authorization header).
type Secret string

const redacted = "[redacted]"

// Reveal returns the credential itself.
func (s Secret) Reveal() string { return string(s) }

// String redacts the value.
func (s Secret) String() string { return redacted }

// GoString redacts the value for %#v.
func (s Secret) GoString() string { return redacted }

// LogValue redacts the value in slog records.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText redacts the value in encoders (JSON, YAML).
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
