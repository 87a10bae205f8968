package k8stest

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRecoverHostAfterAKilledCluster: a real-tier test binary killed from
// outside leaves its host record, its processes and its host changes; the
// next cluster restores from the record before it records the host. The
// test makes each kind of change a killed cluster leaves (a mount under
// its directory, a pinned network namespace, an address on lo, a sysctl,
// a process naming its directory, a process in a kubepods cgroup, a
// filter chain with a jump to it from INPUT, an IP set), and recoverHost
// undoes them all: the host equals the record, the processes
// are gone, and so are the directory and the record. Real tier only: it
// changes the host as root, as the tier does.
func TestRecoverHostAfterAKilledCluster(t *testing.T) {
	if !RealEnvSet() || os.Geteuid() != 0 {
		t.Skipf("real-Pod tier skipped: set %s=1 and run as root", RealEnv)
	}
	lock, err := lockHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unlockHost(lock) })
	tools := os.Getenv(ToolsEnv)
	if tools == "" {
		t.Fatalf("%s=1 needs %s (scripts/k8s-tools.sh real)", RealEnv, ToolsEnv)
	}
	before, err := recordHost(tools)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := os.MkdirTemp("", "rtsandbox-k8s-dead-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dead) })
	record := filepath.Join(t.TempDir(), "host.json")
	if err := saveHost(record, savedHost{Before: before, Dir: dead, Tools: tools}); err != nil {
		t.Fatal(err)
	}

	mnt := filepath.Join(dead, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	_, statErr := os.Stat(netnsDir)
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		t.Cleanup(func() { os.Remove(netnsDir) })
	}
	netns := filepath.Join(netnsDir, "cni-rtsandbox-recover-test")
	if err := os.WriteFile(netns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(netns) })
	if err := run("ip", "addr", "add", "192.0.2.251/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "addr", "del", "192.0.2.251/32", "dev", "lo").Run() })
	sysctl := "/proc/sys/kernel/panic_on_oops"
	flipped := "1"
	if before.Sysctls["kernel/panic_on_oops"] == "1" {
		flipped = "0"
	}
	if err := os.WriteFile(sysctl, []byte(flipped), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(sysctl, []byte(before.Sysctls["kernel/panic_on_oops"]), 0o644) })
	named := start(t, "bash", "-c", "exec -a sleeper-"+dead+" sleep 300")
	cg := "/sys/fs/cgroup/kubepods-rtsandbox-recover-test"
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		cg = "/sys/fs/cgroup/pids/kubepods-rtsandbox-recover-test"
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Rmdir(cg) })
	inCgroup := start(t, "sleep", "300")
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(inCgroup.pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	const set, chain = "rtsandbox-recover-test", "RTSANDBOX-RECOVER-TEST"
	if _, err := ipset(tools, "create", set, "hash:ip"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ipset(tools, "destroy", set) })
	for _, args := range [][]string{{"-N", chain}, {"-A", chain, "-m", "set", "--match-set", set, "src", "-j", "RETURN"},
		{"-I", "INPUT", "-m", "comment", "--comment", "rtsandbox recover test", "-j", chain}} {
		if err := run("iptables", args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		exec.Command("iptables", "-D", "INPUT", "-m", "comment", "--comment", "rtsandbox recover test", "-j", chain).Run()
		exec.Command("iptables", "-F", chain).Run()
		exec.Command("iptables", "-X", chain).Run()
	})

	if err := recoverHost(record); err != nil {
		t.Fatalf("recoverHost = %v", err)
	}
	for name, p := range map[string]*sleeper{"the process naming the directory": named, "the process in the kubepods cgroup": inCgroup} {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			t.Errorf("%s outlived the recovery", name)
		}
	}
	after, err := recordHost(tools)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the host after the recovery differs from the record (-record +after):\n%s", diff)
	}
	for _, gone := range []string{record, dead, netns, cg} {
		if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the recovery: %v; want it gone", gone, err)
		}
	}
	if err := recoverHost(record); err != nil {
		t.Errorf("recoverHost without a record = %v; want nothing to do", err)
	}
}

// TestRecoverHostRefusesAnUnusableRecord: a record that does not parse,
// or names no absolute directory, stops the next cluster instead of
// being ignored (the host's state is unknown then).
func TestRecoverHostRefusesAnUnusableRecord(t *testing.T) {
	for _, body := range []string{"{", `{"Before":{},"Dir":""}`, `{"Before":{},"Dir":"relative"}`, `{"Before":{},"Dir":"/x","More":1}`} {
		path := filepath.Join(t.TempDir(), "host.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := recoverHost(path); err == nil {
			t.Errorf("recoverHost(%s) = nil; want an error", body)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the unusable record %s was removed: %v", body, err)
		}
	}
}

// sleeper is a started process and its end.
type sleeper struct {
	pid  int
	done chan struct{}
}

// start runs name with args; the test kills it at the end if the
// recovery did not.
func start(t *testing.T, name string, args ...string) *sleeper {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &sleeper{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	return p
}
