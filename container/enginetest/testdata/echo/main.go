// Command echo is the stand-in worker of the engine conformance suite
// (container/enginetest) and the Docker engine's integration tests. It
// reads {"mode": ..., "text": ...} from stdin and behaves as the mode says;
// the default mode replies {"ok":true,"text":"echo: <text>"}.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

type input struct {
	Mode string `json:"mode"`
	Text string `json:"text"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "session" {
		session()
	}
	if len(os.Args) > 2 && os.Args[1] == "listen" { // a stand-in server: accepts on each port, forever
		listen(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "sleep" { // a child of mode spawn
		time.Sleep(time.Minute)
		return
	}
	raw, err := io.ReadAll(io.LimitReader(os.Stdin, 256<<10))
	if err != nil {
		os.Exit(3)
	}
	// On Kubernetes the engine writes the broker hello first
	// (wire.BrokerHello): one line, kept for mode "broker".
	var hello []byte
	if len(os.Args) > 1 && os.Args[1] == "--broker-from-stdin" {
		i := strings.IndexByte(string(raw), '\n')
		if i < 0 {
			os.Exit(5)
		}
		hello, raw = raw[:i], raw[i+1:]
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		os.Exit(4)
	}
	switch in.Mode {
	case "fail": // a well-formed reply with exit code 1
		reply(false, "failed on purpose")
		os.Exit(1)
	case "big": // 3 MiB of stdout, more than the driver keeps
		os.Stdout.Write([]byte(strings.Repeat("x", 3<<20)))
	case "noisy": // 200 KiB of stderr, more than the driver counts
		os.Stderr.Write([]byte(strings.Repeat("e", 200<<10)))
		reply(true, "noisy")
	case "long": // a reply text of 100,001 UTF-16 units
		reply(true, strings.Repeat("a", 100001))
	case "hostile": // PID 1 that ignores SIGTERM and never exits
		hang()
	case "early": // the reply, its end mark and more, then never exits
		reply(true, "early: "+in.Text)
		os.Stdout.Write([]byte("\nnot the reply"))
		hang()
	case "early-invalid": // an end mark after no reply, then never exits
		os.Stdout.Write([]byte(`{"ok":tru` + "\n"))
		hang()
	case "write": // leaves a file in the workspace
		err := os.WriteFile("/workspace/out.txt", []byte(in.Text), 0o600)
		reply(err == nil, fmt.Sprint(err))
	case "probe": // reports what the sandbox allows
		reply(true, probe())
	case "broker": // one call to the broker of the hello, with its token
		reply(true, callBroker(hello))
	case "dial": // dials each address of text from the Pod's own network view
		reply(true, dial(strings.Fields(in.Text), false))
	case "dial-settled": // the same, once the first address is no longer reached
		reply(true, dial(strings.Fields(in.Text), true))
	case "spawn": // starts up to 200 processes, reports how many started
		reply(true, fmt.Sprintf("spawned=%d", spawn(200)))
	default:
		reply(true, "echo: "+in.Text)
	}
}

// hang ignores SIGTERM and never exits, as a hostile PID 1 would.
func hang() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	for {
		time.Sleep(time.Hour)
	}
}

func reply(ok bool, text string) {
	b, _ := json.Marshal(map[string]any{"ok": ok, "text": text})
	os.Stdout.Write(b)
}

// probe returns one line per check, "name=value".
func probe() string {
	broker, err := os.ReadFile("/broker/probe.txt")
	lines := []string{
		fmt.Sprintf("uid=%d", os.Getuid()),
		fmt.Sprintf("gid=%d", os.Getgid()),
		"env=" + strings.Join(os.Environ(), ";"),
		fmt.Sprintf("broker-read=%q/%v", broker, err == nil),
		"broker-write=" + writable("/broker/x"),
		"root-write=" + writable("/x"),
		"tmp-write=" + writable("/tmp/x"),
		"workspace-write=" + writable("/workspace/probe"),
		"capeff=" + statusField("CapEff"),
		"nonewprivs=" + noNewPrivs(),
		"net=" + netDevices(),
		"tmp-noexec=" + tmpNoexec(),
		"pids-max=" + firstLine("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"),
		"nofile=" + nofile(),
		"kernel=" + kernelRelease(),
	}
	return strings.Join(lines, "\n")
}

// noNewPrivs asks the kernel (prctl PR_GET_NO_NEW_PRIVS) rather than
// /proc/self/status, which gVisor's does not fill in.
func noNewPrivs() string {
	const prGetNoNewPrivs = 39
	r, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetNoNewPrivs, 0, 0)
	if errno != 0 {
		return "?"
	}
	return fmt.Sprint(r)
}

// spawn starts up to n sleeping copies of itself until the sandbox
// refuses one, kills them and returns how many started.
func spawn(n int) int {
	var started []*exec.Cmd
	for range n {
		c := exec.Command("/proc/self/exe", "sleep")
		if c.Start() != nil {
			break
		}
		started = append(started, c)
	}
	for _, c := range started {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	return len(started)
}

// kernelRelease is the release of the kernel that answers the worker's
// system calls: the host's under runc, gVisor's own under runsc.
func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "error"
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// session stands in for the long-lived session worker (command
// ["session"]): it logs the probe (one "name=value" line each), whether
// it can write its run directory and, last, a ready marker, all in one
// write on stdout (the engine copies stdout and stderr apart, so a marker
// on stderr could be logged before the probe), then waits for SIGTERM or
// SIGKILL.
func session() {
	fmt.Println(probe() + "\nrun-write=" + writable("/run/sandbox/x") + "\nsession worker ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	os.Exit(0)
}

// statusField reads a field of /proc/self/status, such as CapEff.
func statusField(name string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// netDevices lists the network interfaces the container sees, sorted:
// sysfs's, or, where the runtime's sysfs has no class/net (gVisor in a
// Pod), the kernel's answer to a netlink dump of links.
func netDevices() string {
	var names []string
	if entries, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range entries {
			names = append(names, e.Name())
		}
	} else if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			names = append(names, i.Name)
		}
	} else {
		return "?"
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// tmpNoexec reports whether /tmp is mounted noexec.
func tmpNoexec() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/tmp" {
			if strings.Contains(","+f[5]+",", ",noexec,") {
				return "yes"
			}
			return "no"
		}
	}
	return "?"
}

func firstLine(paths ...string) string {
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return "?"
}

func nofile() string {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return "?"
	}
	return fmt.Sprintf("%d:%d", r.Cur, r.Max)
}

func writable(p string) string {
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		return "no"
	}
	os.Remove(p)
	return "yes"
}

// callBroker posts {} to the model route of the broker the hello names,
// with its token, and reports the answer's status line: proof that the
// worker reaches its broker, and through it the turn's.
func callBroker(hello []byte) string {
	var h struct{ Broker, Token string }
	if err := json.Unmarshal(hello, &h); err != nil {
		return "no hello: " + err.Error()
	}
	conn, err := net.DialTimeout("tcp", h.Broker, 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /model HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer sandbox-dummy-key\r\n"+
		"Content-Type: application/json\r\nContent-Length: 2\r\nRtsandbox-Token: %s\r\n\r\n{}", h.Token)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "read: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// dial reports, one line per address, what a TCP dial to it from here
// meets: "addr=connected", "addr=refused" (a reset or an ICMP rejection, as
// a policy's REJECT sends), or "addr=" and the error, each dialled once.
// With settle, the first address is dialled every 100 ms until it is no
// longer connected, at most 10 s, and a first line says after how long
// ("settled=<ms>" or "settled=never"): a policy enforcer that programs a
// Pod's rules once the Pod has its address is measured, not raced.
func dial(addrs []string, settle bool) string {
	if len(addrs) == 0 {
		return "no address"
	}
	var lines []string
	if settle {
		start := time.Now()
		first := dialOne(addrs[0])
		for first == "connected" && time.Since(start) < 10*time.Second {
			time.Sleep(100 * time.Millisecond)
			first = dialOne(addrs[0])
		}
		settled := "never"
		if first != "connected" {
			settled = fmt.Sprint(time.Since(start).Milliseconds())
		}
		lines = append(lines, "settled="+settled)
	}
	for _, a := range addrs {
		lines = append(lines, a+"="+dialOne(a))
	}
	return strings.Join(lines, "\n")
}

func dialOne(addr string) string {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	switch {
	case err == nil:
		conn.Close()
		return "connected"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	default:
		return err.Error()
	}
}

// listen accepts TCP connections on each port and closes them: a live
// target for mode dial. It never returns.
func listen(ports []string) {
	for _, p := range ports {
		l, err := net.Listen("tcp", ":"+p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(6)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					os.Exit(7)
				}
				c.Close()
			}
		}()
	}
	select {}
}
