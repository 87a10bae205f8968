package subpath

import "testing"

func TestRel(t *testing.T) {
	tests := []struct {
		dir, p, want string
		ok           bool
	}{
		{"/srv/channels", "/srv/channels/party/a/run", "party/a/run", true},
		{"/srv/channels", "/srv/channels/x", "x", true},
		{"/srv/channels", "/srv/channels", "", false},
		{"/srv/channels", "/srv", "", false},
		{"/srv/channels", "/srv/channels-x/ws", "", false},
		{"/srv/channels", "/srv/other/run", "", false},
		{"/srv/channels", "/srv/channels/../etc", "", false},
		{"/srv/channels", "/srv/channels/a/", "", false},
		{"/srv/channels", "srv/channels/a", "", false},
		{"srv", "srv/a", "", false},
		{"/", "/a", "a", true},
		{"/srv/channels", "/srv/channels/..a", "..a", true},
	}
	for _, tt := range tests {
		got, ok := Rel(tt.dir, tt.p)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Rel(%q, %q) = %q, %v; want %q, %v", tt.dir, tt.p, got, ok, tt.want, tt.ok)
		}
		if Below(tt.dir, tt.p) != tt.ok {
			t.Errorf("Below(%q, %q) != %v", tt.dir, tt.p, tt.ok)
		}
	}
}
