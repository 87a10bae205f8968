package fakediscord

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClientReachesOnlyTheFake(t *testing.T) {
	s := New(Options{Token: "tok"})
	defer s.Close()
	c := s.Client()
	if _, err := c.Get("https://example.com/"); err == nil || !strings.Contains(err.Error(), "no network") {
		t.Errorf("GET example.com = %v; want a refusal", err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "https://discord.com/api/v9/gateway", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /gateway = %d; want 200", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", "https://discord.com/api/v9/channels/1/messages", strings.NewReader(`{"content":"x"}`))
	req.Header.Set("Authorization", "Bot wrong")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	calls := s.Calls()
	if resp.StatusCode != http.StatusUnauthorized || len(calls) != 2 || calls[1].Status != 401 || calls[1].Path != "/channels/1/messages" {
		t.Errorf("wrong token: status %d, calls %+v", resp.StatusCode, calls)
	}
	c.CloseIdleConnections()
}
