package rtsandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
)

func TestSecretRedactsItselfEverywhere(t *testing.T) {
	s := Secret("real-model-key")
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("call", "key", s)
	js, _ := json.Marshal(struct{ K Secret }{s})
	outs := map[string]string{
		"fmt-v":   fmt.Sprintf("%v", s),
		"fmt-s":   fmt.Sprint(s),
		"fmt-gov": fmt.Sprintf("%#v", s),
		"slog":    logs.String(),
		"json":    string(js),
	}
	for name, out := range outs {
		if strings.Contains(out, "real-model-key") {
			t.Errorf("%s output %q contains the secret", name, out)
		}
	}
	if s.Reveal() != "real-model-key" {
		t.Errorf("Reveal() = %q; want the value", s.Reveal())
	}
}

func TestUTF16Len(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{{"", 0}, {"abc", 3}, {"丁", 1}, {"😀", 2}, {"\xff", 1}}
	for _, tt := range tests {
		if got := UTF16Len(tt.in); got != tt.want {
			t.Errorf("UTF16Len(%q) = %d; want %d", tt.in, got, tt.want)
		}
	}
}

func TestNameRules(t *testing.T) {
	long := strings.Repeat("a", 48)
	tests := []struct {
		name     string
		tool, fn bool
	}{
		{"search", true, true}, {"a", true, true}, {long, true, true}, {long + "a", false, true},
		{strings.Repeat("a", 64), false, true}, {strings.Repeat("a", 65), false, false},
		{"Search", false, false}, {"1abc", false, false}, {"a-b", false, false}, {"", false, false},
		{"foo/..", false, false},
	}
	for _, tt := range tests {
		if got := ValidToolName(tt.name); got != tt.tool {
			t.Errorf("ValidToolName(%q) = %v; want %v", tt.name, got, tt.tool)
		}
		if got := ValidFunctionName(tt.name); got != tt.fn {
			t.Errorf("ValidFunctionName(%q) = %v; want %v", tt.name, got, tt.fn)
		}
	}
}

func TestChannelKeyValid(t *testing.T) {
	tests := []struct {
		key  ChannelKey
		want bool
	}{
		{"discord:112233", true}, {"http:lobby", true}, {"fake:guests", true}, {"a_b-c:x y", true},
		{"Discord:1", false}, {"discord:", false}, {":x", false}, {"discord:a\nb", false}, {"nocolon", false},
		// MaxChannelKey bytes, and one more (the session spec's bound,
		// held by every use of the key).
		{ChannelKey("http:" + strings.Repeat("c", MaxChannelKey-5)), true},
		{ChannelKey("http:" + strings.Repeat("c", MaxChannelKey-4)), false},
	}
	for _, tt := range tests {
		if got := tt.key.Valid(); got != tt.want {
			t.Errorf("ChannelKey(%q).Valid() = %v; want %v", tt.key, got, tt.want)
		}
	}
}

func TestSpeakerValidate(t *testing.T) {
	ok := Speaker{ID: "guest", Name: "Guest", PrincipalID: "p_guest"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v; want nil", ok, err)
	}
	for _, bad := range []Speaker{
		{ID: "guest", Name: "Guest"},
		{ID: "guest", Name: "Guest", PrincipalID: strings.Repeat("p", 257)},
		{ID: strings.Repeat("i", 257), Name: "Guest", PrincipalID: "p"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%.40v) = nil; want error", bad)
		}
	}
}

func TestChannelKeyRuleNamesTheBound(t *testing.T) {
	if !strings.Contains(ChannelKeyRule, " "+strconv.Itoa(MaxChannelKey)+" bytes") {
		t.Errorf("ChannelKeyRule %q does not name MaxChannelKey (%d)", ChannelKeyRule, MaxChannelKey)
	}
}
