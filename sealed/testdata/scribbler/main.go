// Command scribbler is a hostile worker for the warm pool's freshness
// test: after its turn it looks for the marks of an earlier turn in every
// directory of its container, then writes its own mark into every
// directory it can write (/tmp, /tmp/home, /workspace, /dev, /dev/shm and
// whatever else is writable), and replies with the turn's own state and
//
//	host=<hostname: the engine's container ID> found=<marks> wrote=<dirs>
//
// with the lists comma-separated and sorted.
package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const mark = ".rtsandbox-scribble"

func main() {
	var turn struct {
		Memory  json.RawMessage `json:"memory"`
		History json.RawMessage `json:"history"`
	}
	in, _ := io.ReadAll(os.Stdin)
	_ = json.Unmarshal(in, &turn)
	host, _ := os.Hostname()
	var found, dirs []string
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && (p == "/proc" || p == "/sys"):
			return fs.SkipDir // the kernel's views, not the container's storage
		case d.IsDir():
			dirs = append(dirs, p)
		case d.Name() == mark:
			found = append(found, p)
		}
		return nil
	})
	var wrote []string
	for _, dir := range dirs {
		if os.WriteFile(filepath.Join(dir, mark), []byte(host), 0o644) == nil {
			wrote = append(wrote, dir)
		}
	}
	slices.Sort(found)
	slices.Sort(wrote)
	out, _ := json.Marshal(map[string]any{
		"ok":    true,
		"text":  "host=" + host + " found=" + strings.Join(found, ",") + " wrote=" + strings.Join(wrote, ","),
		"state": map[string]json.RawMessage{"memory": turn.Memory, "history": turn.History},
	})
	os.Stdout.Write(out)
}
