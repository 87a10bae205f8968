package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/session"
)

// wedgeFiles are the messages of issue 21's wedge: a 24 MiB file, then
// twice 20 files of halving size (12 MiB, 6 MiB …), zeros as base64.
func wedgeFiles() [][]apiFile {
	zeros := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	one := []apiFile{{Name: "big.bin", MIMEType: "application/octet-stream", Data: zeros(24 << 20)}}
	var halving []apiFile
	for i := range 20 {
		halving = append(halving, apiFile{Name: fmt.Sprintf("h%d.bin", i), MIMEType: "application/octet-stream", Data: zeros(12 << 20 >> i)})
	}
	return [][]apiFile{one, halving, halving}
}

// TestSessionServeWorkspaceNeverLocks (issue 21 item 3), through `rtsandbox
// serve` and its chat API with real Docker, under the hard bound (a
// loop-mounted 64 MiB image) and the soft one (the same bound measured):
// a guest sends the finding's three messages of attachments; the files
// past the room the channel's turns need are refused with the attachments
// notice, so another guest's turn after it still answers; status shows
// the workspace's use, not full; the owner's fresh answers with its own
// text (not the host's disk) and empties the old conversation's files, so
// a large file fits again. The two cases share the worker image and the
// stand-in model; each costs one serve, one container and about 150 MiB of
// request bodies.
func TestSessionServeWorkspaceNeverLocks(t *testing.T) {
	parallelServe(t)
	model := echoModel()
	t.Cleanup(model.Close)
	tag, _ := sessionDocker(t)
	for _, mode := range []string{"hard", "soft"} {
		t.Run(mode, func(t *testing.T) {
			if sup := session.ProbeDisk(); mode == "hard" && !sup.Hard {
				if dockertest.InCI() {
					t.Fatalf("the hard disk bound cannot be tested under CI=true: %s", sup.Reason)
				}
				t.Skip("the hard disk bound is unavailable:", sup.Reason)
			}
			addr := freeAddr(t)
			cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr,
				"  turn_timeout: 120s\n  disk: {mode: "+mode+", size_mb: 64, max_files: 512}\n")
			addMember(t, cfg, "http:bob")
			s := startServe(t, addr, "--config", cfg)
			const ch = "http:lobby"

			refused := 0
			for i, files := range wedgeFiles() {
				text, _ := s.sayFilesOK(t, ch, fmt.Sprintf("keep these %d", i), files)
				if strings.Contains(text, rtsandbox.AttachNoRoomReason) {
					refused++
				}
				if strings.Contains(text, rtsandbox.WorkspaceFullText) {
					t.Fatalf("message %d was refused for a full workspace: %q", i, text)
				}
			}
			if refused == 0 {
				t.Error("no reply told the guest its files found no room")
			}
			s.sayAs(t, ch, "bob", "still here", "Answer to still here")
			status := s.statusText(t, ch)
			if !strings.Contains(status, "Workspace ("+mode+" bound): ") || strings.Contains(status, rtsandbox.WorkspaceFullStatus) {
				t.Errorf("status = %q; want the workspace's use, not full", status)
			}

			code, body := s.call(t, "POST", "/api/v1/channels/"+ch+"/fresh", serveOwnerToken, "")
			if code != 200 || !strings.Contains(body, rtsandbox.FreshText) {
				t.Fatalf("fresh = %d %s\nserve:\n%s", code, body, s.out.String())
			}
			text, _ := s.sayFilesOK(t, ch, "after fresh", wedgeFiles()[0])
			if strings.Contains(text, rtsandbox.AttachNoRoomReason) {
				t.Errorf("a file after fresh found no room: %q", text)
			}
			s.sayAs(t, ch, "bob", "and now", "Answer to and now")
			if mode == "hard" {
				s.off(t, ch) // serve's stop leaves mounts, as it leaves containers
			}
			s.stopOK(t)
		})
	}
}
