package scripts_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeDocker answers `docker info --format '{{json .Runtimes}}'` with the
// runtimes of the config file, as a daemon that reloaded it would.
const fakeDocker = `#!/usr/bin/env bash
jq -c '.runtimes // {}' "$DOCKERD_CONFIG"
`

// registerEnv runs scripts/runsc-register.sh against conf, with stand-ins
// for runsc, docker and pgrep (naming a sleep process the test owns as
// the one dockerd, which the script's SIGHUP ends).
func registerEnv(t *testing.T, conf string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("jq is needed (.ci/run installs it):", err)
	}
	bin := t.TempDir()
	daemon := exec.Command("sleep", "60")
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })
	for name, body := range map[string]string{
		"runsc":  "#!/bin/sh\n",
		"docker": fakeDocker,
		"pgrep":  "#!/bin/sh\necho " + strconv.Itoa(daemon.Process.Pid) + "\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("./runsc-register.sh")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "DOCKERD_CONFIG="+conf)
	return cmd
}

// TestRunscRegisterMerges: the script adds the runsc entry the seal needs
// and keeps every other key of the daemon's config; a second run changes
// nothing; a config that is not JSON is left as it was and the script
// fails.
func TestRunscRegisterMerges(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "daemon.json")
	before := `{"log-driver": "local", "runtimes": {"kata": {"path": "/usr/bin/kata"}}, "runsc-unrelated": 1}`
	if err := os.WriteFile(conf, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := registerEnv(t, conf).CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	got := readJSON(t, conf)
	want := map[string]any{
		"log-driver":      "local",
		"runsc-unrelated": 1.0,
		"runtimes": map[string]any{
			"kata":  map[string]any{"path": "/usr/bin/kata"},
			"runsc": map[string]any{"path": got["runtimes"].(map[string]any)["runsc"].(map[string]any)["path"], "runtimeArgs": []any{"--network=none", "--host-uds=open"}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("daemon.json after the first run (-want +got):\n%s", diff)
	}
	first, _ := os.ReadFile(conf)
	if out, err := registerEnv(t, conf).CombinedOutput(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if second, _ := os.ReadFile(conf); string(second) != string(first) {
		t.Errorf("a second run rewrote daemon.json:\n%s\nwas\n%s", second, first)
	}

	broken := `{"log-driver": "local",`
	if err := os.WriteFile(conf, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := registerEnv(t, conf).CombinedOutput(); err == nil {
		t.Errorf("a broken daemon.json was accepted:\n%s", out)
	}
	if after, _ := os.ReadFile(conf); string(after) != broken {
		t.Errorf("a broken daemon.json was rewritten: %s", after)
	}
	if left, _ := filepath.Glob(conf + ".*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return m
}
