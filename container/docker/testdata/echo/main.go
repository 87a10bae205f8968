// Command echo is a stand-in worker for the driver's integration tests. It
// reads {"mode": ..., "text": ...} from stdin and behaves as the mode says;
// the default mode replies {"ok":true,"text":"echo: <text>"}.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type input struct {
	Mode string `json:"mode"`
	Text string `json:"text"`
}

func main() {
	raw, err := io.ReadAll(io.LimitReader(os.Stdin, 256<<10))
	if err != nil {
		os.Exit(3)
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
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		for {
			time.Sleep(time.Hour)
		}
	case "write": // leaves a file in the workspace
		err := os.WriteFile("/workspace/out.txt", []byte(in.Text), 0o600)
		reply(err == nil, fmt.Sprint(err))
	case "probe": // reports what the sandbox allows
		reply(true, probe())
	default:
		reply(true, "echo: "+in.Text)
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
	}
	return strings.Join(lines, "\n")
}

func writable(p string) string {
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		return "no"
	}
	os.Remove(p)
	return "yes"
}
