package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/session"
)

// TestSessionServeDiskBound: through `rtsandbox serve` with
// session.disk.mode hard, a session channel's worker sees at /workspace the
// channel's own loop-mounted ext4 filesystem (the same device the host
// mounted, nosuid,nodev,noexec); once the workspace is full the guest's
// next message is answered with the fixed workspace text through the HTTP
// API; the owner's off unmounts it and frees its loop device.
func TestSessionServeDiskBound(t *testing.T) {
	if sup := session.ProbeDisk(); !sup.Hard {
		if dockertest.InCI() {
			t.Fatalf("the hard disk bound cannot be tested under CI=true: %s", sup.Reason)
		}
		t.Skip("the hard disk bound is unavailable:", sup.Reason)
	}
	e := echoSession(t, "  turn_timeout: 120s\n  disk: {mode: hard, size_mb: 64, max_files: 512}\n")
	s := e.s
	s.sayOne(t, "http:lobby", "hello", "Answer to hello")
	ws := filepath.Join(e.state, "party", "http_lobby", "workspace")
	dev, opts := mountOf(t, ws)
	if !strings.Contains(","+opts+",", ",nosuid,") || !strings.Contains(","+opts+",", ",noexec,") {
		t.Errorf("workspace mount options %q", opts)
	}
	c := inspectContainer(t, e.cli, oneContainer(t, e.cli, e.tag, s).ID)
	var st unix.Stat_t
	if err := unix.Stat(c.proc+"/root/workspace", &st); err != nil || st.Dev != dev {
		t.Errorf("the worker's /workspace is device %d (%v); want the channel's filesystem %d", st.Dev, err, dev)
	}

	// Fill the workspace from the host (root), as a worker writing without
	// stopping would: ENOSPC within the bound.
	f, err := os.Create(filepath.Join(ws, "outbox", "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	written := 0
	for written <= 128<<20 {
		n, err := f.Write(chunk)
		written += n
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write = %v; want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if written > 64<<20 {
		t.Errorf("wrote %d bytes into a 64 MiB workspace", written)
	}
	s.sayOne(t, "http:lobby", "one more", rtsandbox.WorkspaceFullText)

	s.off(t, "http:lobby")
	if d, _ := mountOf(t, ws); d != 0 {
		t.Error("the workspace is still mounted after the owner's off")
	}
	s.stopOK(t)
}

// mountOf is the device and per-mount options of what is mounted at path
// (0 and "" when nothing is).
func mountOf(t *testing.T, path string) (uint64, string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dev uint64
	var opts string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[4] != path {
			continue
		}
		var major, minor uint32
		if _, err := fmt.Sscanf(fields[2], "%d:%d", &major, &minor); err == nil {
			dev, opts = unix.Mkdev(major, minor), fields[5]
		}
	}
	return dev, opts
}
