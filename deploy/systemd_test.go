package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

const unitPath = "systemd/rtsandbox.service"

// unitBinary is the ExecStart binary the unit names.
const unitBinary = "/usr/local/bin/rtsandbox"

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the unit, its
// ExecStart pointed at a real executable (this test's binary), and wants
// no output at all: verify exits 0 on an unknown key or a value it cannot
// parse and only prints a warning, which would leave a hardening line
// silently ignored.
func TestSystemdUnitVerifies(t *testing.T) {
	tool := requireTool(t, "systemd-analyze")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := readFile(t, unitPath)
	if !strings.Contains(unit, "ExecStart="+unitBinary+" ") {
		t.Fatalf("%s: ExecStart does not run %s", unitPath, unitBinary)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rtsandbox.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, unitBinary, self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
}

// mountNamespaceKeys are the directives that make systemd run a service
// in a mount namespace of its own (systemd 252, exec_needs_mount_namespace
// in src/core/execute.c), plus PrivateNetwork, which implies one in later
// versions. A mount serve makes there (a session workspace's image)
// never reaches dockerd, so the unit must use none of them.
var mountNamespaceKeys = []string{
	"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateIPC",
	"PrivateNetwork", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
	"ProtectControlGroups", "ProtectProc", "ProcSubset", "ReadWritePaths", "ReadOnlyPaths",
	"InaccessiblePaths", "ExecPaths", "NoExecPaths", "BindPaths", "BindReadOnlyPaths",
	"TemporaryFileSystem", "RootDirectory", "RootImage", "MountImages", "ExtensionImages",
	"ExtensionDirectories", "LogNamespace", "NetworkNamespacePath", "IPCNamespacePath",
	"DynamicUser",
	// Legacy spellings of ReadWritePaths and friends.
	"ReadWriteDirectories", "ReadOnlyDirectories", "InaccessibleDirectories",
}

// deviceKeys limit the unit to an allow-list of devices, which would shut
// out /dev/loop-control and /dev/loopN (the hard disk bound);
// PrivateUsers takes root's mount rights away.
var deviceKeys = []string{"DeviceAllow", "DevicePolicy", "ProtectClock", "PrivateUsers"}

// TestSystemdUnitKeepsDockerMountNamespace holds the unit to what session
// mode needs, so that a later edit adding a "harmless" ProtectSystem= or
// PrivateTmp= fails here instead of on an operator's first session turn:
// no mount namespace (the state directory and the workspace mounts stay
// where dockerd sees them, and writable), the devices of the loop mounts,
// the capabilities and system calls of the mounts and of handing
// directories to sandbox.user, and the sockets serve uses.
func TestSystemdUnitKeepsDockerMountNamespace(t *testing.T) {
	u := parseUnit(t, readFile(t, unitPath))
	svc := u["Service"]
	for _, k := range slices.Concat(mountNamespaceKeys, deviceKeys) {
		if v, ok := svc[k]; ok {
			t.Errorf("[Service] %s=%s: session mode needs serve in dockerd's mount namespace with every device (docs/operations.md, \"Running under systemd\")", k, strings.Join(v, " "))
		}
	}
	if v, ok := svc["MountFlags"]; ok && last(v) != "shared" {
		t.Errorf("[Service] MountFlags=%s makes a mount namespace", last(v))
	}
	want := map[string][]string{
		"ExecStart":                {unitBinary, "serve", "--config", "/etc/rtsandbox/rtsandbox.yaml"},
		"User":                     {"root"},
		"CapabilityBoundingSet":    {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SYS_ADMIN"},
		"SystemCallFilter":         {"@mount", "@system-service"},
		"RestrictAddressFamilies":  {"AF_INET", "AF_INET6", "AF_UNIX"},
		"NoNewPrivileges":          {"yes"},
		"RestartPreventExitStatus": {"2"},
	}
	got := map[string][]string{}
	for k := range want {
		got[k] = strings.Fields(last(svc[k]))
		if k != "ExecStart" {
			slices.Sort(got[k])
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("[Service] directives (-want +got):\n%s", d)
	}
	for _, k := range []string{"Requires", "After"} {
		if !slices.Contains(strings.Fields(strings.Join(u["Unit"][k], " ")), "docker.service") {
			t.Errorf("[Unit] %s does not name docker.service", k)
		}
	}
}

// parseUnit reads a systemd unit file into section → key → values (a key
// given twice keeps both, as systemd does for list settings).
func parseUnit(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	u := map[string]map[string][]string{}
	var sec map[string][]string
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			sec = map[string][]string{}
			u[line[1:len(line)-1]] = sec
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continuation lines are not supported by this test", unitPath, n)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == nil {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", unitPath, n, line)
			}
			k = strings.TrimSpace(k)
			sec[k] = append(sec[k], strings.TrimSpace(v))
		}
	}
	return u
}

func last(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// requireTool returns the path of an external checker. Without it a test
// skips, except under CI=true, where .ci/run installs it and a skip would
// prove nothing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if dockertest.InCI() {
			t.Fatalf("%s is needed under CI=true (.ci/run installs it): %v", name, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}
