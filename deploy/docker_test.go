package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/internal/hostbin"
)

// dockerSocket is where the Docker CLI, the moby client and compose.yaml
// find the daemon.
const dockerSocket = "/var/run/docker.sock"

// TestServeImageRunsAsNonRoot builds the serve image from
// docker/Dockerfile around a host binary built as `make build` builds it,
// runs `rtsandbox version` in it, then `rtsandbox doctor` as compose.yaml
// runs serve (non-root, the socket's group, a read-only root, no
// capabilities, the state directory at the same path): the daemon must
// answer the container's user and the state directory must pass. The
// image and the containers are removed when the test ends.
func TestServeImageRunsAsNonRoot(t *testing.T) {
	dockertest.Require(t)
	tag := "rtsandbox-serve-test-" + randomHex(t) + ":local"
	buildServeImage(t, tag)

	out, err := dockerRun(t, "run", "--rm", "--network", "none", tag, "version")
	if err != nil || !strings.HasPrefix(out, "rtsandbox ") {
		t.Fatalf("version in the image: %v\n%s", err, out)
	}

	uid, gid := containerUser()
	state := filepath.Join(t.TempDir(), "state") // dockerd resolves it on this host: same path inside
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, uid, gid); err != nil {
		t.Fatal(err)
	}
	cfgDir := t.TempDir()
	workerTag := strings.Replace(tag, "serve", "worker", 1)
	cfg := fmt.Sprintf("state_dir: %s\nallow_http: true\nmodel: {url: http://127.0.0.1:1/v1/chat/completions, name: m, api_key_env: MODEL_KEY}\nsandbox: {image: %s}\n",
		state, workerTag)
	if err := os.WriteFile(filepath.Join(cfgDir, "rtsandbox.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	asServe := []string{"run", "--rm", "--network", "none",
		"--user", fmt.Sprintf("%d:%d", uid, gid), "--group-add", strconv.FormatUint(uint64(socketGroup(t)), 10),
		"--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
		"-v", dockerSocket + ":" + dockerSocket, "-v", state + ":" + state, "-v", cfgDir + ":/etc/rtsandbox:ro",
		"-e", "MODEL_KEY=k", tag}
	t.Cleanup(func() { removeImage(t, workerTag) })
	if out, err := dockerRun(t, append(asServe, "image", "build", "--config", "/etc/rtsandbox/rtsandbox.yaml")...); err != nil {
		t.Fatalf("image build in the image, through the host's daemon: %v\n%s", err, out)
	}
	out, err = dockerRun(t, append(asServe, "doctor", "--config", "/etc/rtsandbox/rtsandbox.yaml")...)
	if err != nil {
		t.Errorf("doctor in the image: %v", err)
	}
	for _, check := range []string{"docker", "worker image", "state_dir", "worker user", "model.api_key_env"} {
		if !regexp.MustCompile(`(?m)^ok\s+` + regexp.QuoteMeta(check) + `\s`).MatchString(out) {
			t.Errorf("doctor in the image: check %q is not ok", check)
		}
	}
	if t.Failed() {
		t.Logf("doctor output:\n%s", out)
	}
}

// buildServeImage builds docker/Dockerfile as its comment says: a context
// of the host binary and a CA bundle. The image is removed when t ends.
func buildServeImage(t *testing.T, tag string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()
	hostbin.Build(t, root, ctx)
	if err := os.Remove(filepath.Join(ctx, hostbin.WorkerFile)); err != nil { // embedded; not part of the context
		t.Fatal(err)
	}
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if errors.Is(err, os.ErrNotExist) {
		ca = nil // a host without a bundle: the image then trusts no CA, which the test does not need
	} else if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "ca-certificates.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeImage(t, tag) })
	if out, err := dockerRun(t, "build", "-q", "-f", filepath.Join(root, "deploy", "docker", "Dockerfile"), "-t", tag, ctx); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
}

// removeImage removes tag's image; one that is not there is no error.
func removeImage(t *testing.T, tag string) {
	if out, err := exec.Command("docker", "image", "rm", "-f", tag).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such image") {
		t.Errorf("docker image rm %s: %v\n%s", tag, err, out)
	}
}

// dockerRun runs the Docker CLI and returns its combined output.
func dockerRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

// containerUser is the user the container runs as: the Dockerfile's
// 65532 when the test may chown to it (root), else the test's own user,
// so that the state directory is the container user's either way.
func containerUser() (uid, gid int) {
	if os.Geteuid() == 0 {
		return 65532, 65532
	}
	return os.Geteuid(), os.Getegid()
}

// socketGroup is the group that owns the Docker socket, which the
// container's user needs.
func socketGroup(t *testing.T) uint32 {
	t.Helper()
	fi, err := os.Stat(dockerSocket)
	if err != nil {
		t.Fatalf("the test runs the daemon's socket into the container: %v", err)
	}
	return fi.Sys().(*syscall.Stat_t).Gid
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// compose is the part of compose.yaml the tests read.
type compose struct {
	Services map[string]struct {
		Image       string   `yaml:"image"`
		User        string   `yaml:"user"`
		GroupAdd    []string `yaml:"group_add"`
		Volumes     []string `yaml:"volumes"`
		EnvFile     []string `yaml:"env_file"`
		ReadOnly    bool     `yaml:"read_only"`
		CapDrop     []string `yaml:"cap_drop"`
		SecurityOpt []string `yaml:"security_opt"`
	} `yaml:"services"`
}

// TestComposeMountsSocketAndStateAtSamePath reads compose.yaml and the
// config it mounts (loaded by the config package, as serve loads it): the
// Docker socket is mounted, the config's state_dir is mounted at the same
// absolute path on both sides (dockerd resolves the paths serve gives it
// on the host), so is a party_dir outside it, credentials come from an
// env_file, and the service runs as the Dockerfile's non-root user with
// the socket's group, a read-only root and no capabilities.
func TestComposeMountsSocketAndStateAtSamePath(t *testing.T) {
	var c compose
	if err := yaml.Unmarshal([]byte(readFile(t, "docker/compose.yaml")), &c); err != nil {
		t.Fatal(err)
	}
	s, ok := c.Services["serve"]
	if !ok {
		t.Fatal("compose.yaml: no service serve")
	}
	mounts := map[string]string{} // container path → host path
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("compose.yaml: volume %q is not HOST:CONTAINER", v)
		}
		mounts[parts[1]] = parts[0]
	}
	if mounts[dockerSocket] != dockerSocket {
		t.Errorf("compose.yaml: the Docker socket is not mounted at %s (mounts %v)", dockerSocket, mounts)
	}
	cfgHost, ok := mounts["/etc/rtsandbox/rtsandbox.yaml"]
	if !ok {
		t.Fatalf("compose.yaml: no config mounted at /etc/rtsandbox/rtsandbox.yaml (the Dockerfile's CMD)")
	}
	cfg, err := config.Load(filepath.Join("docker", cfgHost))
	if err != nil {
		t.Fatalf("the compose config: %v", err)
	}
	for what, dir := range map[string]string{"state_dir": cfg.StateDir, "session.party_dir": cfg.Session.PartyDir} {
		if !coveredSamePath(mounts, dir) {
			t.Errorf("compose.yaml: %s %s is not mounted at the same absolute path inside and outside", what, dir)
		}
	}
	if len(s.EnvFile) == 0 {
		t.Error("compose.yaml: no env_file for the credentials")
	}
	if s.User != "65532:65532" || !strings.Contains(readFile(t, "docker/Dockerfile"), "\nUSER 65532:65532\n") {
		t.Errorf("compose.yaml user %q: want the Dockerfile's non-root 65532:65532", s.User)
	}
	if len(s.GroupAdd) != 1 || !strings.Contains(s.GroupAdd[0], "DOCKER_GID") {
		t.Errorf("compose.yaml group_add %q: want the socket's group from DOCKER_GID", s.GroupAdd)
	}
	if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("compose.yaml: read_only %v, cap_drop %q, security_opt %q; want true, [ALL], no-new-privileges:true", s.ReadOnly, s.CapDrop, s.SecurityOpt)
	}
}

// coveredSamePath reports whether dir lies in a mount whose host and
// container paths are the same.
func coveredSamePath(mounts map[string]string, dir string) bool {
	for in, host := range mounts {
		if in == host && (dir == in || strings.HasPrefix(dir, strings.TrimSuffix(in, "/")+"/")) {
			return true
		}
	}
	return false
}
