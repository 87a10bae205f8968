package container_test

import (
	"errors"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/container"
)

// validSpec is the reference's "Args" spec.
func validSpec() container.Spec {
	return container.Spec{
		Name:         "rtsandbox-test",
		Image:        "sandbox:local",
		UID:          1000,
		GID:          1000,
		RunDir:       "/srv/sandbox/run/turn-a",
		WorkspaceDir: "/srv/sandbox/work/channel-a",
		Limits:       container.DefaultLimits(),
		Labels:       map[string]string{container.InstallationLabel: "prod", container.RoleLabel: container.RoleTurn},
	}
}

type specCase struct {
	name    string
	edit    func(*container.Spec)
	wantMsg string // "" means valid
}

// specCases holds every refusal of the reference's tests plus the Go-specific ones.
var specCases = []specCase{
	{"valid", func(*container.Spec) {}, ""},
	{"overrides", func(s *container.Spec) {
		s.Limits = container.Limits{MemoryMB: 768, CPUs: 0.5, PIDs: 32, WorkspaceMB: 128}
	}, ""},
	{"minimum-limits", func(s *container.Spec) {
		s.Limits = container.Limits{MemoryMB: 64, CPUs: 0.01, PIDs: 8, WorkspaceMB: 1}
	}, ""},
	{"workspace-tmpfs-no-dir", func(s *container.Spec) { s.WorkspaceDir = "" }, ""},
	{"workspace-mb-0", func(s *container.Spec) { s.Limits.WorkspaceMB = 0 }, "invalid resource limits"},
	{"workspace-mb-over-memory", func(s *container.Spec) { s.Limits.WorkspaceMB = s.Limits.MemoryMB + 1 }, "invalid resource limits"},
	{"workspace-mb-equals-memory", func(s *container.Spec) { s.Limits.WorkspaceMB = s.Limits.MemoryMB }, ""},
	{"uid-0", func(s *container.Spec) { s.UID = 0 }, "sandbox requires a non-root user and group"},
	{"gid-0", func(s *container.Spec) { s.GID = 0 }, "sandbox requires a non-root user and group"},
	{"uid-negative", func(s *container.Spec) { s.UID = -1 }, "sandbox requires a non-root user and group"},
	{"run-dir-root", func(s *container.Spec) { s.RunDir = "/" }, "mount paths must be absolute dedicated directories"},
	{"run-dir-relative", func(s *container.Spec) { s.RunDir = "relative" }, "mount paths must be absolute dedicated directories"},
	{"run-dir-mount-injection", func(s *container.Spec) { s.RunDir = "/srv/evil,dst=/host" }, "mount paths must be absolute dedicated directories"},
	{"workspace-newline", func(s *container.Spec) { s.WorkspaceDir = "/srv/a\n/b" }, "mount paths must be absolute dedicated directories"},
	{"workspace-cr", func(s *container.Spec) { s.WorkspaceDir = "/srv/a\r" }, "mount paths must be absolute dedicated directories"},
	{"workspace-slash", func(s *container.Spec) { s.WorkspaceDir = "/" }, "mount paths must be absolute dedicated directories"},
	{"run-dir-unclean", func(s *container.Spec) { s.RunDir = "/srv/sandbox/run/../work" }, "mount paths must be absolute dedicated directories"},
	{"run-dir-trailing-slash", func(s *container.Spec) { s.RunDir = "/srv/run/" }, "mount paths must be absolute dedicated directories"},
	{"run-dir-equals-workspace", func(s *container.Spec) { s.RunDir = s.WorkspaceDir }, "broker and workspace mounts must be separate"},
	{"run-dir-inside-workspace", func(s *container.Spec) { s.RunDir = s.WorkspaceDir + "/run" }, "broker and workspace mounts must be separate"},
	{"workspace-inside-run-dir", func(s *container.Spec) { s.WorkspaceDir = s.RunDir + "/w" }, "broker and workspace mounts must be separate"},
	{"sibling-prefix-is-fine", func(s *container.Spec) { s.RunDir = s.WorkspaceDir + "-run" }, ""},
	{"image-privileged-flag", func(s *container.Spec) { s.Image = "--privileged" }, "invalid container name or image"},
	{"image-empty", func(s *container.Spec) { s.Image = "" }, "invalid container name or image"},
	{"image-space", func(s *container.Spec) { s.Image = "img --privileged" }, "invalid container name or image"},
	{"image-nbsp", func(s *container.Spec) { s.Image = "img\u00a0x" }, "invalid container name or image"},
	{"name-upper", func(s *container.Spec) { s.Name = "Sandbox" }, "invalid container name or image"},
	{"name-slash-dotdot", func(s *container.Spec) { s.Name = "foo/.." }, "invalid container name or image"},
	{"name-leading-dash", func(s *container.Spec) { s.Name = "-x" }, "invalid container name or image"},
	{"name-hex-only-could-match-an-id", func(s *container.Spec) { s.Name = "0123abcd" }, "invalid container name or image"},
	{"name-max", func(s *container.Spec) { s.Name = "x" + strings.Repeat("y", 90) }, ""},
	{"name-max-plus-1", func(s *container.Spec) { s.Name = "x" + strings.Repeat("y", 91) }, "invalid container name or image"},
	{"memory-negative", func(s *container.Spec) { s.Limits.MemoryMB = -1 }, "invalid resource limits"},
	{"memory-63", func(s *container.Spec) { s.Limits.MemoryMB = 63 }, "invalid resource limits"},
	{"memory-overflows-bytes", func(s *container.Spec) { s.Limits.MemoryMB = math.MaxInt }, "invalid resource limits"},
	{"cpus-0", func(s *container.Spec) { s.Limits.CPUs = 0 }, "invalid resource limits"},
	{"cpus-nan", func(s *container.Spec) { s.Limits.CPUs = math.NaN() }, "invalid resource limits"},
	{"cpus-inf", func(s *container.Spec) { s.Limits.CPUs = math.Inf(1) }, "invalid resource limits"},
	{"cpus-rounds-to-unlimited", func(s *container.Spec) { s.Limits.CPUs = 1e-10 }, "invalid resource limits"},
	// Go ints cannot be NaN; the zero value is what a missing or NaN-parsed
	// value would become, so it stands in for the reference's pids NaN.
	{"pids-zero-nan-equivalent", func(s *container.Spec) { s.Limits.PIDs = 0 }, "invalid resource limits"},
	{"pids-7", func(s *container.Spec) { s.Limits.PIDs = 7 }, "invalid resource limits"},
	{"label-key-upper", func(s *container.Spec) { s.Labels = map[string]string{"Bad": "x"} }, "invalid container labels"},
	{"label-value-newline", func(s *container.Spec) { s.Labels = map[string]string{"a": "x\ny"} }, "invalid container labels"},
	{"runtime-runc", func(s *container.Spec) { s.Runtime = container.RuntimeRunc }, ""},
	{"runtime-runsc", func(s *container.Spec) { s.Runtime = container.RuntimeRunsc }, ""},
	// Fail closed: a name the engine might know as another runtime (an
	// unconfined one, or runsc registered without --network=none under
	// another name) is refused, never passed on.
	{"runtime-unknown", func(s *container.Spec) { s.Runtime = "kata" }, "invalid container runtime"},
	{"runtime-case", func(s *container.Spec) { s.Runtime = "RUNSC" }, "invalid container runtime"},
	{"runtime-shim-path", func(s *container.Spec) { s.Runtime = "io.containerd.runc.v2" }, "invalid container runtime"},
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range specCases {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.edit(&s)
			err := s.Validate()
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v; want nil", s, err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantMsg || !errors.Is(err, container.ErrInvalidSpec) {
				t.Fatalf("Validate(%+v) = %v; want %q wrapping ErrInvalidSpec", s, err, tc.wantMsg)
			}
		})
	}
}

func TestLimitsEngineUnits(t *testing.T) {
	l := container.Limits{MemoryMB: 768, CPUs: 0.5, PIDs: 32}
	if got, want := l.MemoryBytes(), int64(768<<20); got != want {
		t.Errorf("MemoryBytes() = %d; want %d", got, want)
	}
	if got, want := l.NanoCPUs(), int64(5e8); got != want {
		t.Errorf("NanoCPUs() = %d; want %d", got, want)
	}
}

var nameShape = regexp.MustCompile(`^rtsandbox-[0-9a-f]{16}-[0-9a-f]{8}$`)

func TestName(t *testing.T) {
	a, b := container.Name("discord:1"), container.Name("discord:1")
	if !nameShape.MatchString(a) {
		t.Fatalf("Name(%q) = %q; want shape %v", "discord:1", a, nameShape)
	}
	// sha256("discord:1") starts with these 16 hex digits.
	if a[:26] != b[:26] || a == b {
		t.Errorf("Name twice = %q, %q; want same channel hash, different suffix", a, b)
	}
	if other := container.Name("discord:2"); other[:26] == a[:26] {
		t.Errorf("Name(discord:2) = %q shares the hash of %q", other, a)
	}
	s := validSpec()
	s.Name = a
	if err := s.Validate(); err != nil {
		t.Errorf("Validate with Name() = %v; want nil", err)
	}
}

func TestTurnLabels(t *testing.T) {
	got, err := container.TurnLabels("prod-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"rtsandbox.installation": "prod-1", "rtsandbox.role": "turn"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TurnLabels(prod-1) mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "Prod", "a/b", "a b", strings.Repeat("a", 64)} {
		if _, err := container.TurnLabels(bad); !errors.Is(err, container.ErrInvalidSpec) {
			t.Errorf("TurnLabels(%q) = %v; want ErrInvalidSpec", bad, err)
		}
	}
}

// FuzzSpecValidate checks that whatever Validate accepts keeps the
// invariants the driver relies on.
func FuzzSpecValidate(f *testing.F) {
	for _, tc := range specCases {
		s := validSpec()
		tc.edit(&s)
		f.Add(s.Name, s.Image, s.RunDir, s.WorkspaceDir)
	}
	f.Fuzz(func(t *testing.T, name, image, runDir, workspaceDir string) {
		s := validSpec()
		s.Name, s.Image, s.RunDir, s.WorkspaceDir = name, image, runDir, workspaceDir
		err := s.Validate()
		if err != nil {
			if !errors.Is(err, container.ErrInvalidSpec) {
				t.Fatalf("Validate = %v; want ErrInvalidSpec", err)
			}
			return
		}
		if len(name) > 91 || strings.Trim(name, "0123456789abcdef") == "" || strings.HasPrefix(image, "-") || strings.ContainsAny(image, " \t\n\r\x00") {
			t.Fatalf("accepted name %q image %q", name, image)
		}
		for _, p := range []string{runDir, workspaceDir} {
			if p == "" && p == workspaceDir {
				continue // a tmpfs workspace
			}
			if !filepath.IsAbs(p) || p == "/" || strings.ContainsAny(p, ",\n\r") || filepath.Clean(p) != p {
				t.Fatalf("accepted mount path %q", p)
			}
		}
		if workspaceDir != "" && (inside(runDir, workspaceDir) || inside(workspaceDir, runDir)) {
			t.Fatalf("accepted nested mounts %q and %q", runDir, workspaceDir)
		}
	})
}

// inside reports whether p is dir or lies below it.
func inside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
