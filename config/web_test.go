package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

const webBase = "state_dir: /var/lib/rtsandbox\nmodel: {url: \"https://api.example/v1/chat/completions\", name: top, api_key_env: KEY}\n"

func TestParseWeb(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       Web
	}{
		{"absent", "", Web{}},
		{"full", `web:
  fetch: {enabled: true, max_bytes: 5242880, timeout: 60s}
  search: {provider: searxng, url: https://search.internal.example/search, api_key_env: SEARCH_KEY}
  research: {enabled: true, model: gpt-4.1-mini, max_running_per_channel: 2, timeout: 10m}
`, Web{
			Fetch:    WebFetch{Enabled: true, MaxBytes: 5 << 20, Timeout: 60 * time.Second},
			Search:   &WebSearch{Provider: "searxng", URL: ep("https://search.internal.example/search"), APIKeyEnv: "SEARCH_KEY"},
			Research: WebResearch{Enabled: true, Model: "gpt-4.1-mini", MaxRunningPerChannel: 2, Timeout: 10 * time.Minute},
		}},
		{"defaults", "web:\n  fetch: {}\n  search: {provider: brave, url: https://api.search.brave.com/res/v1/web/search, api_key_env: BRAVE}\n  research: {}\n", Web{
			Fetch:    WebFetch{Enabled: true, MaxBytes: DefaultFetchMaxBytes, Timeout: DefaultFetchTimeout},
			Search:   &WebSearch{Provider: "brave", URL: ep("https://api.search.brave.com/res/v1/web/search"), APIKeyEnv: "BRAVE"},
			Research: WebResearch{Enabled: true, Model: "top", MaxRunningPerChannel: 2, Timeout: 10 * time.Minute},
		}},
		{"disabled", "web:\n  fetch: {enabled: false}\n", Web{
			Fetch:    WebFetch{MaxBytes: DefaultFetchMaxBytes, Timeout: DefaultFetchTimeout},
			Research: WebResearch{Model: "top", MaxRunningPerChannel: 2, Timeout: 10 * time.Minute},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(webBase + tc.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, c.Web); diff != "" {
				t.Errorf("Web (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseWebErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown-key", "web: {fetch: {enabld: true}}", "web.fetch.enabld: unknown key"},
		{"unknown-section", "web: {crawl: {}}", "web.crawl: unknown key"},
		{"max-bytes-high", "web: {fetch: {max_bytes: 33554433}}", "web.fetch.max_bytes: must be an integer of at most 33554432"},
		{"max-bytes-zero", "web: {fetch: {max_bytes: 0}}", "web.fetch.max_bytes: must be an integer of at least 1"},
		{"timeout-high", "web: {fetch: {timeout: 121s}}", "web.fetch.timeout: must be a duration"},
		{"timeout-number", "web: {fetch: {timeout: 60}}", "not a bare number"},
		{"provider", "web: {search: {provider: google, url: https://s.example/}}", `web.search.provider: must be "searxng" or "brave"`},
		{"search-url", "web: {search: {provider: searxng, url: http://s.example/}}", "web.search.url: must be an https URL"},
		{"brave-key", "web: {search: {provider: brave, url: https://s.example/}}", "web.search.api_key_env: is required"},
		{"research-needs-search", "web: {research: {}}", "web.research: requires web.search"},
		{"running-high", "web: {search: {provider: searxng, url: https://s.example/}, research: {max_running_per_channel: 11}}", "at most 10"},
		{"research-timeout-low", "web: {search: {provider: searxng, url: https://s.example/}, research: {timeout: 500ms}}", "web.research.timeout: must be a duration from 1s to 1200s"},
		{"blank-model", "web: {search: {provider: searxng, url: https://s.example/}, research: {model: ' '}}", "web.research.model: must not be blank"},
		{"enabled-type", "web: {fetch: {enabled: yes please}}", "web.fetch.enabled: must be true or false"},
		{"reserved-name", "web: {fetch: {}}\ntools:\n  - {name: web_fetch, description: d, url: https://h.example/, parameters: {type: object}}\n", `tools[0].name: "web_fetch" is reserved`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(webBase + tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("Parse error = %v; want it to contain %q", err, tc.want)
			}
		})
	}
}
