package k8stest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The host state a kubelet changes (docs/kubernetes.md, "Testing"): the sysctls
// it sets, the mounts it makes, the cgroups it creates, the network links
// of the Pod network, the directories it writes by default, and the
// network namespaces containerd pins for its Pods; and what the tier's
// network policy enforcer and Service proxy change: their sysctls, their
// directories and the firewall (firewall.go). The
// real-Pod tier records it before it starts, restores it after, and fails
// when the two differ.
var (
	hostSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", // the kubelet's
		// kube-proxy's, when its flags do not leave them be, and the bridge's
		"net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max",
		"net/netfilter/nf_conntrack_tcp_timeout_established", "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
		"net/netfilter/nf_conntrack_tcp_be_liberal", "net/bridge/bridge-nf-call-iptables"}
	hostDirs = []string{"/var/lib/kubelet", "/var/lib/cni", "/var/log/pods", "/var/log/containers", "/etc/cni/net.d", "/opt/cni", "/var/lib/kube-router"}
)

// hostState is a comparable record of that state.
type hostState struct {
	Sysctls map[string]string
	Mounts  []string // mount points
	Cgroups []string // cgroup directories named kubepods*, at any controller's top
	Links   []string // network link names
	Addrs   []string // "link address" of every interface address
	Dirs    []string // which of hostDirs exist
	NetNS   []string // the names under netnsDir (containerd pins each Pod's network namespace there)
	// The firewall (firewall.go): each of firewallTables' rules, the
	// nftables tables, the IP sets' names.
	Firewall map[string][]string
	NFTables []string
	IPSets   []string
}

// netnsDir is where containerd's CRI pins Pod network namespaces: a file
// per Pod sandbox, bind-mounted, that outlives its mount when the sandbox
// is not removed through the CRI (a cluster stopped by killing it).
const netnsDir = "/run/netns"

// recordHost records the host's state; tools is the real tier's tools
// directory, whose ipset lists the IP sets.
func recordHost(tools string) (hostState, error) {
	s := hostState{Sysctls: map[string]string{}}
	for _, k := range hostSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return s, err
		}
		s.Sysctls[k] = strings.TrimSpace(string(b))
	}
	mounts, err := mountPoints()
	if err != nil {
		return s, err
	}
	s.Mounts = mounts
	s.Cgroups, _ = filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	more, _ := filepath.Glob("/sys/fs/cgroup/kubepods*")
	s.Cgroups = append(s.Cgroups, more...)
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return s, fmt.Errorf("ip link: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			s.Links = append(s.Links, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	out, err = exec.Command("ip", "-o", "addr", "show").Output()
	if err != nil {
		return s, fmt.Errorf("ip addr: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			s.Addrs = append(s.Addrs, f[1]+" "+f[3])
		}
	}
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); err == nil {
			s.Dirs = append(s.Dirs, d)
		}
	}
	if entries, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range entries {
			s.NetNS = append(s.NetNS, e.Name())
		}
	}
	if err := recordFirewall(&s, tools); err != nil {
		return s, err
	}
	slices.Sort(s.Addrs)
	slices.Sort(s.Mounts)
	slices.Sort(s.Cgroups)
	slices.Sort(s.Links)
	return s, nil
}

// mountPoints lists the mount points of this mount namespace, but for
// Docker's own below its data and run directories: the containers of the
// machine's Docker (another package's image build, a test's containers)
// come and go while the tier runs, and are no change of the tier's.
func mountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 && !dockersOwn(f[4]) {
			out = append(out, f[4])
		}
	}
	return out, sc.Err()
}

// dockersOwn reports a mount point of the machine's Docker: a container's
// root or its network namespace.
func dockersOwn(mount string) bool {
	for _, dir := range []string{"/var/lib/docker/", "/run/docker/", "/var/run/docker/"} {
		if strings.HasPrefix(mount, dir) {
			return true
		}
	}
	return false
}

// restoreHost undoes what the real tier changed since before: it unmounts
// what was mounted under the tier's directories (deepest first), removes
// the kubepods cgroups (leaves first), deletes the links it added, writes
// the sysctls back, removes the kubelet's directories that did not
// exist and the network namespace files containerd pinned, and undoes the
// firewall's changes (undoFirewall). It then records
// the host again and returns the difference, if any, as an error.
func restoreHost(before hostState, workdir, tools string) error {
	var errs []error
	now, err := recordHost(tools)
	if err != nil {
		return err
	}
	errs = append(errs, undoFirewall(before, now, tools))
	added := slices.DeleteFunc(slices.Clone(now.Mounts), func(m string) bool { return slices.Contains(before.Mounts, m) })
	slices.SortFunc(added, func(a, b string) int { return len(b) - len(a) })
	for _, m := range added {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	for _, cg := range now.Cgroups {
		if !slices.Contains(before.Cgroups, cg) {
			errs = append(errs, removeCgroup(cg))
		}
	}
	for _, l := range now.Links {
		if !slices.Contains(before.Links, l) && !strings.HasPrefix(l, "veth") {
			if out, err := exec.Command("ip", "link", "delete", l).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", l, err, out))
			}
		}
	}
	for _, a := range now.Addrs {
		link, addr, _ := strings.Cut(a, " ")
		if !slices.Contains(before.Addrs, a) && slices.Contains(before.Links, link) {
			if out, err := exec.Command("ip", "addr", "del", addr, "dev", link).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip addr del %s: %v: %s", a, err, out))
			}
		}
	}
	for k, v := range before.Sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range hostDirs {
		if !slices.Contains(before.Dirs, d) {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	for _, n := range now.NetNS {
		if !slices.Contains(before.NetNS, n) { // its mount went with the added mounts
			errs = append(errs, os.Remove(filepath.Join(netnsDir, n)))
		}
	}
	if workdir != "" {
		errs = append(errs, os.RemoveAll(workdir))
	}
	after, err := recordHost(tools)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	// A veth goes with its Pod's network namespace, once the kernel
	// reaps it: compare without them.
	strip := func(s hostState) hostState {
		s.Links = slices.DeleteFunc(slices.Clone(s.Links), func(l string) bool { return strings.HasPrefix(l, "veth") })
		s.Addrs = slices.DeleteFunc(slices.Clone(s.Addrs), func(a string) bool { return strings.HasPrefix(a, "veth") })
		return s
	}
	if diff := cmp.Diff(strip(before), strip(after)); diff != "" {
		errs = append(errs, fmt.Errorf("the host differs after the real-Pod tier (-before +after):\n%s", diff))
	}
	return errors.Join(errs...)
}

// removeCgroup removes a cgroup directory tree, leaves first (a cgroup
// directory is removed with rmdir, its files go with it).
func removeCgroup(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// hostRecord is where a real-tier cluster keeps, while it runs, the host
// as it was before it and its own directory: written before the first
// host change, removed once Stop restored the host. A test binary killed
// from outside (a timeout, a signal) leaves it, and the next cluster to
// take the host lock restores from it first (recoverHost): the record
// dies with the process otherwise, and the next record would take the
// leftovers for the host's own state.
const hostRecord = "/run/lock/rtsandbox-k8s-real.host.json"

// savedHost is hostRecord's content.
type savedHost struct {
	Before hostState
	Dir    string // the cluster's directory, removed with its processes
	Tools  string // the tools directory it ran from (its ipset)
}

// saveHost writes rec to path atomically (a temporary file renamed).
func saveHost(path string, rec savedHost) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".host-*.json")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// recoverHost restores the host from the record at path that a killed
// cluster left, if any, by the path its Stop would have taken
// (restoreFrom), then removes the record. Call it holding the host lock. A record that
// does not parse is an error, never ignored: the host's state is unknown.
func recoverHost(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec savedHost
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil || !filepath.IsAbs(rec.Dir) || !filepath.IsAbs(rec.Tools) {
		return fmt.Errorf("the real tier's host record %s is unusable (%v): restore the host by hand, then remove it", path, err)
	}
	if err := restoreFrom(rec.Before, rec.Dir, rec.Tools); err != nil {
		return fmt.Errorf("restore the host a killed real-tier cluster left: %w", err)
	}
	return os.Remove(path)
}

// restoreFrom ends what a real-tier cluster of directory dir left running
// and then undoes its host changes since before (restoreHost), removing
// dir: a cluster's Stop and the recovery of a killed one take this one
// path. What it ends: the processes naming dir (containerd's shims,
// gVisor's sentries and gofers), and every process in a kubepods cgroup
// made since before (the workloads runc and gVisor started), so that
// their cgroups can go.
func restoreFrom(before hostState, dir, tools string) error {
	pattern := regexp.QuoteMeta(dir)
	errs := []error{killUntilGone("processes naming "+dir, func() bool {
		exec.Command("pkill", "-KILL", "-f", pattern).Run()
		return exec.Command("pgrep", "-f", pattern).Run() == nil // pgrep fails when it finds none
	})}
	now, err := recordHost(tools)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, cg := range now.Cgroups {
		if !slices.Contains(before.Cgroups, cg) {
			errs = append(errs, killUntilGone("processes in "+cg, func() bool { return killProcs(cg) }))
		}
	}
	return errors.Join(append(errs, restoreHost(before, dir, tools))...)
}

// killUntilGone calls kill, which SIGKILLs what is left and reports
// whether anything was, every 100 ms until nothing is, at most 10 s.
func killUntilGone(what string, kill func() (left bool)) error {
	for range 100 {
		if !kill() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s outlived SIGKILL by 10 s", what)
}

// killProcs SIGKILLs every process in the cgroup tree at root and reports
// whether there was any.
func killProcs(root string) bool {
	left := false
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				left = true
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
	return left
}
