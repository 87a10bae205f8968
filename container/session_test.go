package container_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/container"
)

// validSessionSpec is a session spec that passes Validate.
func validSessionSpec() container.SessionSpec {
	return container.SessionSpec{
		Name: container.SessionName("prod", "discord:party"), Image: "sandbox:test",
		Installation: "prod", Channel: "discord:party", Profile: "studio",
		UID: 1000, GID: 1000, RunDir: "/srv/channel/run", WorkspaceDir: "/srv/channel/workspace",
	}
}

// docs/session.md, "The container" validation: each refusal with the reference's text.
func TestSessionSpecValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*container.SessionSpec)
		wantMsg string
	}{
		{"valid", func(*container.SessionSpec) {}, ""},
		{"name", func(s *container.SessionSpec) { s.Name = "Bad Name" }, "Invalid container specification"},
		{"all-hex name", func(s *container.SessionSpec) { s.Name = "abc123" }, "Invalid container specification"},
		{"image flag", func(s *container.SessionSpec) { s.Image = "-v" }, "Invalid container specification"},
		{"image space", func(s *container.SessionSpec) { s.Image = "a b" }, "Invalid container specification"},
		{"profile", func(s *container.SessionSpec) { s.Profile = "a.b" }, "Invalid container specification"},
		{"profile 101", func(s *container.SessionSpec) { s.Profile = strings.Repeat("p", 101) }, "Invalid container specification"},
		{"installation", func(s *container.SessionSpec) { s.Installation = "" }, "Invalid container specification"},
		{"channel", func(s *container.SessionSpec) { s.Channel = "nokind" }, "Invalid container specification"},
		{"uid 0", func(s *container.SessionSpec) { s.UID = 0 }, "Worker must be non-root"},
		{"gid 0", func(s *container.SessionSpec) { s.GID = 0 }, "Worker must be non-root"},
		{"run relative", func(s *container.SessionSpec) { s.RunDir = "run" }, "Invalid mount path"},
		{"run root", func(s *container.SessionSpec) { s.RunDir = "/" }, "Invalid mount path"},
		{"run colon", func(s *container.SessionSpec) { s.RunDir = "/srv/a:b" }, "Invalid mount path"},
		{"workspace comma", func(s *container.SessionSpec) { s.WorkspaceDir = "/srv/a,b" }, "Invalid mount path"},
		{"workspace newline", func(s *container.SessionSpec) { s.WorkspaceDir = "/srv/a\nb" }, "Invalid mount path"},
		{"nested", func(s *container.SessionSpec) { s.RunDir = "/srv/channel/workspace/run" }, "Invalid mount path"},
		{"time zone", func(s *container.SessionSpec) { s.TimeZone = "Nowhere/Else" }, "Invalid container specification"},
		{"Local zone", func(s *container.SessionSpec) { s.TimeZone = "Local" }, "Invalid container specification"},
		{"zone ok", func(s *container.SessionSpec) { s.TimeZone = "Asia/Taipei" }, ""},
		{"limits", func(s *container.SessionSpec) { s.Limits = container.SessionLimits{MemoryMB: 63, CPUs: 1, PIDs: 8} }, "Invalid container specification"},
		// The reference's test "A log driver -bad → throws "log driver"".
		{"runtime runsc", func(s *container.SessionSpec) { s.Runtime = container.RuntimeRunsc }, ""},
		{"runtime unknown", func(s *container.SessionSpec) { s.Runtime = "kata" }, "Invalid container specification"},
		{"log driver -bad", func(s *container.SessionSpec) { s.Log = container.LogConfig{Driver: "-bad"} }, "Invalid container log driver"},
		{"log option key", func(s *container.SessionSpec) {
			s.Log = container.LogConfig{Driver: "local", Options: map[string]string{"Max": "1"}}
		}, "Invalid container log driver"},
		{"log option value", func(s *container.SessionSpec) {
			s.Log = container.LogConfig{Driver: "local", Options: map[string]string{"max-size": "1\r"}}
		}, "Invalid container log driver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSessionSpec()
			tt.edit(&s)
			err := s.Validate()
			if tt.wantMsg == "" {
				if err != nil {
					t.Errorf("Validate = %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantMsg || !errors.Is(err, container.ErrInvalidSpec) {
				t.Errorf("Validate = %v; want %q", err, tt.wantMsg)
			}
		})
	}
}

// The reference's test "Default LogConfig", adapted: our default is the local driver
// (journald fails on daemons without it); journald, when configured,
// gets the reference's tag.
func TestSessionLogConfig(t *testing.T) {
	s := validSessionSpec().WithDefaults()
	want := container.LogConfig{Driver: "local", Options: map[string]string{"max-size": "10m", "max-file": "3"}}
	if diff := cmp.Diff(want, s.Log.ForChannel(s.Channel)); diff != "" {
		t.Errorf("default (-want +got):\n%s", diff)
	}
	j := container.LogConfig{Driver: "journald"}.ForChannel("discord:party/x y")
	if diff := cmp.Diff(map[string]string{"tag": "sandbox/discord:party/x_y"}, j.Options); diff != "" {
		t.Errorf("journald options (-want +got):\n%s", diff)
	}
	own := container.LogConfig{Driver: "journald", Options: map[string]string{"tag": "mine"}}.ForChannel("discord:party")
	if own.Options["tag"] != "mine" {
		t.Errorf("journald tag = %q; the operator's own tag must win", own.Options["tag"])
	}
}

// [SEC] docs/session.md, "The container" Env: exactly four variables, no credential and no upstream
// URL; labels carry the installation, role session, channel, profile and
// digest.
func TestSessionEnvAndLabels(t *testing.T) {
	s := validSessionSpec()
	wantEnv := []string{"SANDBOX_PROFILE=studio", "TZ=UTC", "HOME=/tmp/home", "CLAUDE_CODE_OAUTH_TOKEN=sandbox-dummy-token"}
	if diff := cmp.Diff(wantEnv, s.Env()); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{
		container.InstallationLabel: "prod", container.RoleLabel: container.RoleSession,
		container.ChannelLabel: "discord:party", container.ProfileLabel: "studio", container.SpecLabel: s.Digest(),
	}
	if diff := cmp.Diff(wantLabels, s.Labels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if container.RoleSession == container.RoleTurn {
		t.Error("session containers must not carry the role the sealed reaper removes")
	}
}

// The digest changes with anything the create body is made of.
func TestSessionDigest(t *testing.T) {
	base := validSessionSpec()
	edits := map[string]func(*container.SessionSpec){
		"image":   func(s *container.SessionSpec) { s.Image = "sandbox:new" },
		"uid":     func(s *container.SessionSpec) { s.UID = 1001 },
		"zone":    func(s *container.SessionSpec) { s.TimeZone = "Asia/Taipei" },
		"limits":  func(s *container.SessionSpec) { s.Limits = container.SessionLimits{MemoryMB: 512, CPUs: 1, PIDs: 256} },
		"log":     func(s *container.SessionSpec) { s.Log = container.LogConfig{Driver: "json-file"} },
		"profile": func(s *container.SessionSpec) { s.Profile = "other" },
		"run dir": func(s *container.SessionSpec) { s.RunDir = "/srv/other/run" },
		"skills":  func(s *container.SessionSpec) { s.Skills = "0123456789abcdef0123456789abcdef" },
		"disk":    func(s *container.SessionSpec) { s.Disk = "hard" },
		"runtime": func(s *container.SessionSpec) { s.Runtime = container.RuntimeRunsc },
	}
	for name, edit := range edits {
		s := base
		edit(&s)
		if s.Digest() == base.Digest() {
			t.Errorf("%s change keeps the digest", name)
		}
	}
	if base.Digest() != base.WithDefaults().Digest() {
		t.Error("defaults change the digest")
	}
	// A spec without skills hashes as it did before SessionSpec had a
	// Skills field (it is left out of the hashed JSON), so an upgrade
	// does not recreate every worker.
	if data, _ := json.Marshal(base); strings.Contains(string(data), "Skills") {
		t.Errorf("a spec without skills hashes a Skills field: %s", data)
	}
}

// TestSessionDigestRuncIsDefault: naming runc is the container "" made, so
// the digest is the one a worker made before runtimes existed and an
// upgrade recreates no runc worker; runsc is another container.
func TestSessionDigestRuncIsDefault(t *testing.T) {
	base := validSessionSpec()
	runc, runsc := base, base
	runc.Runtime, runsc.Runtime = container.RuntimeRunc, container.RuntimeRunsc
	if runc.Digest() != base.Digest() {
		t.Errorf("runc digest %s; want the runtime-less %s", runc.Digest(), base.Digest())
	}
	if runsc.Digest() == base.Digest() {
		t.Error("runsc keeps the runc digest: a changed runtime would keep the old container")
	}
	if data, _ := json.Marshal(base); strings.Contains(string(data), "Runtime") {
		t.Errorf("a spec without a runtime hashes a Runtime field: %s", data)
	}
}

// Container names are unique per installation and channel, even where
// segments collide or differ only in case, and always valid.
func TestSessionName(t *testing.T) {
	names := map[string]bool{}
	for _, ch := range []string{"discord:a:b", "discord:a_b", "x:A", "x:a", "x:" + strings.Repeat("z", 250)} {
		for _, inst := range []string{"prod", "test"} {
			n := container.SessionName(inst, ch)
			if names[n] {
				t.Errorf("name %s repeats", n)
			}
			names[n] = true
			s := validSessionSpec()
			s.Name = n
			if err := s.Validate(); err != nil {
				t.Errorf("name %s: %v", n, err)
			}
		}
	}
	if got := container.SessionName("prod", "discord:123"); !strings.HasPrefix(got, "rtsandbox-session-discord_123-") {
		t.Errorf("name %q does not show the segment", got)
	}
}

// docs/session.md, "Session runtime" recreate rules (Stale) and the driver's keep rule (Current).
func TestSessionStatusRules(t *testing.T) {
	spec := validSessionSpec()
	cur := container.SessionStatus{State: container.StateRunning, Image: spec.Image, Profile: spec.Profile, Digest: spec.Digest()}
	tests := []struct {
		name           string
		st             container.SessionStatus
		stale, current bool
	}{
		{"current", cur, false, true},
		{"missing", container.SessionStatus{State: container.StateMissing}, true, false},
		{"stopped", container.SessionStatus{State: container.StateStopped, Image: spec.Image}, true, false},
		{"other image", container.SessionStatus{State: container.StateRunning, Image: "x", Profile: spec.Profile, Digest: spec.Digest()}, true, false},
		{"other profile", container.SessionStatus{State: container.StateRunning, Image: spec.Image, Profile: "x", Digest: spec.Digest()}, true, false},
		{"other digest", container.SessionStatus{State: container.StateRunning, Image: spec.Image, Profile: spec.Profile, Digest: "x"}, true, false},
		{"unknown labels", container.SessionStatus{State: container.StateRunning}, false, false},
	}
	for _, tt := range tests {
		if got := tt.st.Stale(spec); got != tt.stale {
			t.Errorf("%s: Stale = %v", tt.name, got)
		}
		if got := tt.st.Current(spec); got != tt.current {
			t.Errorf("%s: Current = %v", tt.name, got)
		}
	}
}
