package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// TestParseModelWindow covers context_window and reserve_tokens on the
// model block and on a models: entry: absent (the worker's defaults), the
// ranges the session worker accepts (SessionWorkerConfig) at their
// bounds, and every refusal naming the key and the rule.
func TestParseModelWindow(t *testing.T) {
	type window struct{ Window, Reserve int }
	tests := []struct {
		name    string
		keys    string // added to the model mapping
		want    window
		wantErr string
	}{
		{name: "absent-means-the-defaults", keys: "", want: window{}},
		{name: "smallest-window", keys: ", context_window: 4096", want: window{4096, 0}},
		{name: "largest-window", keys: ", context_window: 10000000", want: window{10000000, 0}},
		{name: "reserve-half-the-window", keys: ", context_window: 4096, reserve_tokens: 2048", want: window{4096, 2048}},
		{name: "reserve-half-the-default-window", keys: ", reserve_tokens: 100000", want: window{0, 100000}},
		{name: "window-too-small", keys: ", context_window: 4095",
			wantErr: "context_window: must be an integer of at least 4096"},
		{name: "window-too-big", keys: ", context_window: 10000001",
			wantErr: "context_window: must be an integer of at most 10000000"},
		{name: "window-not-integer", keys: ", context_window: 200k",
			wantErr: "context_window: must be an integer"},
		{name: "reserve-over-half-the-window", keys: ", context_window: 4096, reserve_tokens: 2049",
			wantErr: "reserve_tokens: must be at most half of context_window (2048)"},
		{name: "reserve-over-half-the-default-window", keys: ", reserve_tokens: 100001",
			wantErr: "reserve_tokens: must be at most half of context_window (100000)"},
		{name: "reserve-zero", keys: ", reserve_tokens: 0",
			wantErr: "reserve_tokens: must be an integer of at least 1"},
		{name: "reserve-negative", keys: ", reserve_tokens: -1",
			wantErr: "reserve_tokens: must be an integer of at least 1"},
	}
	places := []struct {
		name, prefix string
		model        func(*Config) Model
		doc          func(keys string) string
	}{
		{"model", "model.", func(c *Config) Model { return c.Model },
			func(keys string) string {
				return "state_dir: /s\nmodel: {url: 'https://x/', name: m, api_key_env: K" + keys + "}\n"
			}},
		{"models", "models.main.", func(c *Config) Model { return c.Models["main"] },
			func(keys string) string {
				return minimal + "models: {main: {url: 'https://api.anthropic.com', name: c, api_key_env: AK, api: anthropic" + keys + "}}\n"
			}},
	}
	for _, pl := range places {
		for _, tt := range tests {
			t.Run(pl.name+"/"+tt.name, func(t *testing.T) {
				got, err := Parse([]byte(pl.doc(tt.keys)))
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), pl.prefix+tt.wantErr) || !errors.Is(err, rtsandbox.ErrInvalid) {
						t.Fatalf("Parse error = %v; want one containing %q", err, pl.prefix+tt.wantErr)
					}
					if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
						t.Errorf("Parse reported %d problems, want 1: %v", n, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				m := pl.model(got)
				if diff := cmp.Diff(tt.want, window{m.ContextWindow, m.ReserveTokens}); diff != "" {
					t.Errorf("window (-want +got):\n%s", diff)
				}
			})
		}
	}
}
