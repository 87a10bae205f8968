//go:build !race

package broker_test

// The four-body attack of issue 21, measured on a whole process: a
// compromised session worker sent four parallel 96 MiB /model bodies whose
// messages held some 33 million empty arrays; one took 2.1 GB and 42 s of
// CPU, four took serve to 7.0 GB, far past host.memory_limit_mb (1 GiB),
// and the work went on after the turn was canceled.
//
// The broker runs in a child process (this test binary again, running
// TestAttackChild), so that its peak resident size (VmHWM) is its own:
// under the default memory limit and decoding budget of serve, with a
// bound turn. The parent is the worker: it sends the four bodies at once,
// ends the turn once the first is answered, and the child reports its
// peak and the CPU it used in the half second from one second after the
// turn's end. The file is left out under the race detector, whose shadow
// memory would be most of the measure: make unit runs it in its second,
// plain pass.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// attackMemoryMB is serve's default host.memory_limit_mb, which the child
// sets as serve does; attackMargin is what its peak may pass it by: the
// test binary, the runtime and the goroutine stacks outside the Go heap,
// and the collector's lag at the soft limit.
const (
	attackMemoryMB = 1024
	attackMargin   = 128 << 20
)

// attack is one attack: four bodies of shape at route, in the dialect.
type attack struct {
	name    string
	api     string // rtsandbox.ModelAPIAnthropic, or "" for OpenAI chat
	route   string
	body    func(size int) []byte
	inCI    bool // run by default; the others with RTSANDBOX_ATTACKS=all
	refused bool // the rules refuse the body (else it reaches the upstream, which is down)
}

var attacks = []attack{
	{name: "ChatEmptyArrays", route: wire.RouteModel, inCI: true, refused: true, body: func(n int) []byte {
		return []byte(`{"messages":` + flood("EmptyArrays", n-20) + `}`)
	}},
	{name: "MessagesEmptyArrays", api: rtsandbox.ModelAPIAnthropic, route: wire.RouteAnthropicMessages, refused: true, body: func(n int) []byte {
		return []byte(`{"messages":` + flood("EmptyArrays", n-20) + `}`)
	}},
	{name: "ToolUseInputEmptyObjects", api: rtsandbox.ModelAPIAnthropic, route: wire.RouteAnthropicMessages, refused: true, body: func(n int) []byte {
		return []byte(messagesRoutes[2].body(flood("EmptyObjects", n-200)))
	}},
	{name: "SkippedMemberDeepNesting", api: rtsandbox.ModelAPIAnthropic, route: wire.RouteAnthropicMessages, body: func(n int) []byte {
		return []byte(messagesRoutes[3].body(flood("DeepNesting", n-200)))
	}},
	{name: "ToolInputTinyStrings", api: rtsandbox.ModelAPIAnthropic, route: "/tools/recall", refused: true, body: func(n int) []byte {
		return []byte(messagesRoutes[4].body(flood("TinyStrings", n-100)))
	}},
	{name: "MCPArgumentsZeros", api: rtsandbox.ModelAPIAnthropic, route: "/mcp/research", refused: true, body: func(n int) []byte {
		return []byte(messagesRoutes[5].body(flood("Zeros", n-200)))
	}},
	{name: "MessagesHugeText", api: rtsandbox.ModelAPIAnthropic, route: wire.RouteAnthropicMessages, inCI: true, body: func(n int) []byte {
		return []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("a", n-60) + `"}]}`)
	}},
}

// attackReport is what the child prints once measured.
type attackReport struct {
	PeakRSS  int64         // VmHWM, bytes
	IdleCPU  time.Duration // user+system CPU in the half second from 1 s after the turn's end
	TotalCPU time.Duration // user+system CPU of the child's whole life
}

func TestFourBodyAttack(t *testing.T) {
	all := os.Getenv("RTSANDBOX_ATTACKS") == "all"
	for _, a := range attacks {
		if !a.inCI && !all {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			rep, answers := runAttack(t, a)
			t.Logf("%s: peak RSS %d MiB, CPU %v in all, %v idle after the turn's end; answers %v",
				a.name, rep.PeakRSS>>20, rep.TotalCPU.Round(time.Millisecond), rep.IdleCPU.Round(time.Millisecond), answers)
			if limit := int64(attackMemoryMB<<20 + attackMargin); rep.PeakRSS > limit {
				t.Errorf("peak RSS %d MiB; want under host.memory_limit_mb %d MiB plus %d MiB", rep.PeakRSS>>20, attackMemoryMB, attackMargin>>20)
			}
			if rep.IdleCPU > 50*time.Millisecond {
				t.Errorf("the broker used %v of CPU in the half second from 1 s after the turn's end; want it idle (under 50 ms)", rep.IdleCPU)
			}
		})
	}
}

// runAttack runs a's child, attacks it and returns its report and the
// statuses of the four answers.
func runAttack(t *testing.T, a attack) (attackReport, []int) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "broker.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RTSANDBOX_ATTACK_SOCKET="+sock, "RTSANDBOX_ATTACK_API="+a.api)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v\n%s", err, stderr.String())
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("child did not get ready: %q\n%s", lines.Text(), stderr.String())
	}

	body := a.body(rtsandbox.MaxSessionRequest)
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	defer client.CloseIdleConnections()
	answers := make(chan int, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			res, err := client.Post("http://broker"+a.route, "application/json", bytes.NewReader(body))
			if err != nil {
				answers <- 0 // cut off: the turn's end closed the connection
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			answers <- res.StatusCode
		})
	}
	statuses := []int{<-answers}
	fmt.Fprintln(stdin, "end") // the first is answered: the turn ends
	ended := time.Now()
	for range 3 {
		statuses = append(statuses, <-answers)
	}
	wg.Wait()
	if d := time.Since(ended); d > time.Second {
		t.Errorf("the last answer came %v after the turn's end; want the work stopped within 1 s", d)
	}
	if !lines.Scan() {
		t.Fatalf("no report from the child:\n%s", stderr.String())
	}
	var rep attackReport
	if err := json.Unmarshal(lines.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", lines.Text(), err)
	}
	return rep, statuses
}

// TestAttackChild is the broker of TestFourBodyAttack, in its own
// process; it does nothing when run on its own.
func TestAttackChild(t *testing.T) {
	sock := os.Getenv("RTSANDBOX_ATTACK_SOCKET")
	if sock == "" {
		t.Skip("the child process of TestFourBodyAttack")
	}
	debug.SetMemoryLimit(attackMemoryMB << 20) // as serve does (host.memory_limit_mb)
	api := os.Getenv("RTSANDBOX_ATTACK_API")
	modelURL := "https://127.0.0.1:9/v1/chat/completions" // down: no call gets an answer
	if api == rtsandbox.ModelAPIAnthropic {
		modelURL = "https://127.0.0.1:9"
	}
	tool := broker.Tool{Spec: rtsandbox.ToolSpec{Name: "recall", Parameters: json.RawMessage(`{"type":"object"}`)}, Impl: nopTool{}}
	b, err := broker.New(broker.Config{
		API: api, ModelURL: ep(modelURL), Model: hostModel, Stream: true,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return hostSecret, nil },
		Tools:  []broker.Tool{tool},
		MCP: []broker.MCPServer{{Name: "research", URL: ep("https://127.0.0.1:9/mcp"),
			Tools: []rtsandbox.ToolSpec{{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)}}}},
		Intake: broker.NewIntake(rtsandbox.DecodeBudget(attackMemoryMB << 20)),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := broker.NewSession(broker.SessionConfig{Broker: b,
		Worker: wire.SessionWorkerConfig{ModelAPI: api, Model: hostModel, Stream: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Listen(sock); err != nil {
		t.Fatal(err)
	}
	ctx, end := context.WithCancel(context.Background())
	release, err := s.Bind(ctx, wire.SessionBinding{
		Binding: rtsandbox.Binding{Channel: sessChannel, Speaker: sessGuest}, Profile: "studio", Thinking: "high",
		Deadline: time.Now().Add(10 * time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "end" {
		t.Fatalf("parent: %q", in.Text())
	}
	ended := time.Now()
	end()
	time.Sleep(time.Until(ended.Add(time.Second))) // the window is the measure
	before := cpuTime(t)
	time.Sleep(500 * time.Millisecond)
	after := cpuTime(t)
	out, _ := json.Marshal(attackReport{PeakRSS: peakRSS(t), IdleCPU: after - before, TotalCPU: after})
	fmt.Println(string(out))
	in.Scan() // the parent closes stdin once it has read the report
}

// nopTool is a host tool that is never run: the attacks are refused.
type nopTool struct{}

func (nopTool) Run(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
	return "", nil
}

// cpuTime is the process's user and system CPU so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is the process's VmHWM.
func peakRSS(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}
