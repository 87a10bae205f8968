package rtsandbox_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

func TestChannelKeyParts(t *testing.T) {
	tests := []struct {
		key         rtsandbox.ChannelKey
		valid       bool
		kind, local string
	}{
		{"discord:1234", true, "discord", "1234"},
		{"http:lobby:east", true, "http", "lobby:east"},
		{"a-b_c9:x", true, "a-b_c9", "x"},
		{"Discord:1", false, "Discord", "1"},
		{"9x:1", false, "9x", "1"},
		{"discord:", false, "discord", ""},
		{"discord", false, "", ""},
		{"discord:a\nb", false, "discord", "a\nb"},
		{"discord:a\u2028", false, "discord", "a\u2028"},
	}
	for _, tt := range tests {
		got := struct {
			Valid       bool
			Kind, Local string
		}{tt.key.Valid(), tt.key.Kind(), tt.key.LocalID()}
		want := struct {
			Valid       bool
			Kind, Local string
		}{tt.valid, tt.kind, tt.local}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%q (-want +got):\n%s", tt.key, d)
		}
	}
}

func TestValidKind(t *testing.T) {
	for s, want := range map[string]bool{"discord": true, "http": true, "a": true, "": false, "A": false, "1a": false, "a:b": false, "a b": false} {
		if got := rtsandbox.ValidKind(s); got != want {
			t.Errorf("ValidKind(%q) = %v, want %v", s, got, want)
		}
	}
}
