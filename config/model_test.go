package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// TestParseModelAPI covers model.api, max_output_tokens, thinking and
// stream: their defaults, the per-API ranges and every refusal, each naming
// the key and the rule.
func TestParseModelAPI(t *testing.T) {
	const head = "state_dir: /s\nmodel: {name: m, api_key_env: K, "
	tests := []struct {
		name    string
		model   string // the rest of the model mapping
		extra   string // more of the file
		want    Model
		wantErr string
	}{
		{name: "openai-defaults", model: "url: 'https://x/v1/chat/completions'}",
			want: Model{URL: ep("https://x/v1/chat/completions")}},
		{name: "openai-explicit", model: "url: 'https://x/v1', api: openai, max_output_tokens: 32768, stream: true}",
			want: Model{URL: ep("https://x/v1"), API: "openai", MaxOutputTokens: 32768, Stream: true}},
		{name: "anthropic-defaults", model: "url: 'https://api.anthropic.com', api: anthropic}",
			want: Model{URL: ep("https://api.anthropic.com"), API: "anthropic"}},
		{name: "anthropic-explicit", model: "url: 'https://api.anthropic.com', api: anthropic, max_output_tokens: 200000, thinking: xhigh, stream: false}",
			want: Model{URL: ep("https://api.anthropic.com"), API: "anthropic", MaxOutputTokens: 200000, Thinking: "xhigh"}},
		{name: "api-unknown", model: "url: 'https://x/', api: gemini}",
			wantErr: `model.api: must be "openai" or "anthropic"`},
		{name: "api-not-string", model: "url: 'https://x/', api: 1}",
			wantErr: "model.api: must be a string"},
		{name: "stream-not-bool", model: "url: 'https://x/', stream: yes-please}",
			wantErr: "model.stream: must be true or false"},
		{name: "openai-max-output-too-big", model: "url: 'https://x/', max_output_tokens: 32769}",
			wantErr: "model.max_output_tokens: must be an integer of at most 32768"},
		{name: "openai-max-output-zero", model: "url: 'https://x/', max_output_tokens: 0}",
			wantErr: "model.max_output_tokens: must be an integer of at least 1"},
		{name: "anthropic-max-output-too-small", model: "url: 'https://x/', api: anthropic, max_output_tokens: 1024}",
			wantErr: "model.max_output_tokens: must be an integer of at least 1025"},
		{name: "anthropic-max-output-too-big", model: "url: 'https://x/', api: anthropic, max_output_tokens: 200001}",
			wantErr: "model.max_output_tokens: must be an integer of at most 200000"},
		{name: "max-output-float", model: "url: 'https://x/', max_output_tokens: 1.5}",
			wantErr: "model.max_output_tokens: must be an integer"},
		{name: "thinking-unknown", model: "url: 'https://x/', api: anthropic, thinking: max}",
			wantErr: `model.thinking: must be one of ["low" "medium" "high" "xhigh"]`},
		{name: "thinking-with-openai", model: "url: 'https://x/', thinking: low}",
			wantErr: "model.thinking: is only used with api: anthropic"},
		{name: "research-with-anthropic", model: "url: 'https://x/', api: anthropic}",
			extra:   "web: {search: {provider: searxng, url: 'https://s/'}, research: {enabled: true}}\n",
			wantErr: "web.research: requires model.api: openai"},
		{name: "anthropic-url-query", model: "url: 'https://x/?v=1', api: anthropic}",
			wantErr: "model.url: must have no query with api: anthropic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(head + tt.model + "\n" + tt.extra))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, rtsandbox.ErrInvalid) {
					t.Fatalf("Parse error = %v; want one containing %q", err, tt.wantErr)
				}
				if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
					t.Errorf("Parse reported %d problems, want 1: %v", n, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.want.Name, tt.want.APIKeyEnv = "m", "K"
			if diff := cmp.Diff(tt.want, got.Model); diff != "" {
				t.Errorf("Model mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
