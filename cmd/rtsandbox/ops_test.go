package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox/config"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// opsConfig writes a minimal valid config with the given state dir and
// sandbox image ("" leaves the default).
func opsConfig(t *testing.T, stateDir, image string) string {
	t.Helper()
	body := fmt.Sprintf("state_dir: %s\nmodel:\n  url: https://model.example/v1/chat/completions\n  name: m\n  api_key_env: RTS_OPS_KEY\n", stateDir)
	if image != "" {
		body += "sandbox:\n  image: " + image + "\n"
	}
	path := filepath.Join(t.TempDir(), "rtsandbox.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// opsDocker returns a client on the local daemon (see dockertest for the
// skip and CI rule).
func opsDocker(t testing.TB) *client.Client {
	t.Helper()
	return dockertest.Require(t)
}

func opsRandom() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func runOps(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, os.Getenv, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// opsBuildImage runs `rtsandbox image build` with args, expects the given
// tag to be built and removes it when the test ends.
func opsBuildImage(t *testing.T, cli *client.Client, tag string, args ...string) {
	t.Helper()
	d := docker.New(cli)
	t.Cleanup(func() {
		if err := d.RemoveImage(context.Background(), tag); err != nil {
			t.Errorf("RemoveImage(%s) = %v", tag, err)
		}
	})
	code, stdout, stderr := runOps(t, append([]string{"image", "build"}, args...)...)
	if code != exitOK {
		t.Fatalf("image build %q = %d; want 0\nstderr: %s", args, code, stderr)
	}
	for _, want := range []string{"built " + tag + "\n", "worker: go build in ", "elapsed: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("image build stdout = %q; want it to contain %q", stdout, want)
		}
	}
	if ok, err := d.ImageExists(context.Background(), tag); !ok || err != nil {
		t.Errorf("ImageExists(%s) = %v, %v; want true, nil", tag, ok, err)
	}
}

func TestImageBuildTagFlag(t *testing.T) {
	cli := opsDocker(t)
	tag := "rtsandbox-test-cmd:" + opsRandom()
	opsBuildImage(t, cli, tag, "--tag", tag)
}

func TestImageBuildTagFromConfig(t *testing.T) {
	cli := opsDocker(t)
	tag := "rtsandbox-test-cmd:" + opsRandom()
	opsBuildImage(t, cli, tag, "--config", opsConfig(t, "/var/lib/rtsandbox-test", tag))
}

func TestImageTag(t *testing.T) {
	cfg, err := config.Load(opsConfig(t, "/srv/rt", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := host.ImageTag(nil); got != config.DefaultImage {
		t.Errorf("host.ImageTag(nil) = %q; want %q", got, config.DefaultImage)
	}
	if got := host.ImageTag(cfg); got != config.DefaultImage {
		t.Errorf("host.ImageTag(no sandbox.image) = %q; want %q", got, config.DefaultImage)
	}
	cfg.Sandbox.Image = "custom:1"
	if got := host.ImageTag(cfg); got != "custom:1" {
		t.Errorf("host.ImageTag(custom) = %q; want custom:1", got)
	}
}

func TestInstallationID(t *testing.T) {
	a := host.InstallationID(&config.Config{StateDir: "/var/lib/rtsandbox"})
	b := host.InstallationID(&config.Config{StateDir: "/var/lib/rtsandbox/"})
	c := host.InstallationID(&config.Config{StateDir: "/srv/other"})
	if a != b {
		t.Errorf("installationID differs for the same dir: %q, %q", a, b)
	}
	if a == c {
		t.Errorf("host.InstallationID(%q) = host.InstallationID(%q) = %q; want different ids", "/var/lib/rtsandbox", "/srv/other", a)
	}
	if len(a) != 13 || a[0] != 'i' || !rtcontainer.ValidInstallation(a) {
		t.Errorf("installationID = %q; want i + 12 hex digits, a valid installation", a)
	}
}

func TestOpsUsage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("nonsense: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"image-no-subcommand", []string{"image"}, exitUsage},
		{"image-unknown-subcommand", []string{"image", "push"}, exitUsage},
		{"image-build-extra-arg", []string{"image", "build", "extra"}, exitUsage},
		{"image-build-bad-flag", []string{"image", "build", "--nope"}, exitUsage},
		{"image-build-bad-config", []string{"image", "build", "--config", bad}, exitUsage},
		{"image-build-help", []string{"image", "build", "-h"}, exitOK},
		{"reap-no-config", []string{"reap"}, exitUsage},
		{"reap-bad-config", []string{"reap", "--config", bad}, exitUsage},
		{"reap-missing-config", []string{"reap", "--config", filepath.Join(t.TempDir(), "none.yaml")}, exitUsage},
		{"reap-help", []string{"reap", "--help"}, exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, stderr := runOps(t, tt.args...); code != tt.want {
				t.Errorf("run(%q) = %d; want %d\nstderr: %s", tt.args, code, tt.want, stderr)
			}
		})
	}
}

// TestReap leaves two created (never started) containers behind, one of
// this installation and one of another, and checks that reap removes
// exactly the first.
func TestReap(t *testing.T) {
	cli := opsDocker(t)
	tag := "rtsandbox-test-cmd:" + opsRandom()
	opsBuildImage(t, cli, tag, "--tag", tag)
	cfgPath := opsConfig(t, "/var/lib/rtsandbox-reap-"+opsRandom(), "")
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ours := opsLeftover(t, cli, tag, host.InstallationID(cfg))
	theirs := opsLeftover(t, cli, tag, "test-other-"+opsRandom())

	code, stdout, stderr := runOps(t, "reap", "--config", cfgPath)
	id := host.InstallationID(cfg)
	want := fmt.Sprintf("removed 1 leftover container(s) of installation %s\nremoved 0 session container(s) of installation %s\n", id, id)
	// Old untagged worker images of other runs on the daemon may be
	// pruned too: one more line names them.
	if rest, ok := strings.CutPrefix(stdout, want); ok && strings.HasPrefix(rest, "removed ") && strings.Contains(rest, "old untagged worker image(s)") {
		stdout = want
	}
	if code != exitOK || stdout != want {
		t.Errorf("reap = %d, %q; want 0, %q\nstderr: %s", code, stdout, want, stderr)
	}
	ctx := context.Background()
	if _, err := cli.ContainerInspect(ctx, ours, client.ContainerInspectOptions{}); err == nil {
		t.Errorf("container %s of this installation survived reap", ours)
	}
	if _, err := cli.ContainerInspect(ctx, theirs, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("container %s of another installation: %v; want it untouched", theirs, err)
	}
	if code, stdout, _ := runOps(t, "reap", "--config", cfgPath); code != exitOK || !strings.HasPrefix(stdout, "removed 0 ") {
		t.Errorf("second reap = %d, %q; want 0, removed 0", code, stdout)
	}
}

// opsLeftover creates a labelled turn container of installation from image
// without starting it, and removes it when the test ends.
func opsLeftover(t *testing.T, cli *client.Client, image, installation string) string {
	t.Helper()
	labels, err := rtcontainer.TurnLabels(installation)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.ContainerCreate(context.Background(), client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Labels: labels},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
	})
	return res.ID
}
