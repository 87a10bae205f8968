package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/chunk"
)

// openDoor lets everything pass: the router tests that are not about the
// door.
type openDoor struct{}

func (openDoor) Check(string, []rtsandbox.File) error { return nil }

// planted is the credential keyDoor knows: the router's tests see only
// what the door decides (its forms are package door's tests).
const planted = "PLANTED-CREDENTIAL"

// keyDoor refuses any text or file holding planted, as a Door does for a
// credential, naming it by a config key, and counts its calls.
type keyDoor struct {
	mu    sync.Mutex
	texts []string
}

func (d *keyDoor) Check(text string, files []rtsandbox.File) error {
	d.mu.Lock()
	d.texts = append(d.texts, text)
	d.mu.Unlock()
	if strings.Contains(text, planted) {
		return fmt.Errorf("%w: model.api_key_env in the text", rtsandbox.ErrCredential)
	}
	for _, f := range files {
		if strings.Contains(f.Name, planted) || strings.Contains(string(f.Data), planted) {
			return fmt.Errorf("%w: model.api_key_env in a file", rtsandbox.ErrCredential)
		}
	}
	return nil
}

// doorHarness is an input harness behind a keyDoor, recording OnDoor.
func doorHarness(t *testing.T, opts ...harnessOpt) (*harness, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	h := newHarness(t, newMemChannels(guests), append([]harnessOpt{func(o *Options) {
		o.Door = &keyDoor{}
		o.OnDoor = func(ch rtsandbox.ChannelKey, k DeliveryKind) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, string(ch)+" "+string(k))
		}
	}}, opts...)...)
	return h, &seen
}

// wantWithheld checks that nothing the surface got holds planted and that
// the operator log names the class, never the credential's value.
func wantWithheld(t *testing.T, h *harness) {
	t.Helper()
	for _, d := range h.surface.Deliveries() {
		if strings.Contains(d.Chunk, planted) {
			t.Errorf("the surface got %q", d.Chunk)
		}
		for _, f := range d.Files {
			t.Errorf("the surface got file %q", f.Name)
		}
	}
	recs := h.log.records()
	found := false
	for _, r := range recs {
		line := fmt.Sprint(r)
		if strings.Contains(line, planted) {
			t.Errorf("the log holds the credential: %s", line)
		}
		if strings.HasPrefix(r.Msg, "credential at the door") && r.Attrs["class"] == rtsandbox.KindCredential.String() &&
			strings.Contains(r.Attrs["err"], "model.api_key_env") {
			found = true
		}
	}
	if !found {
		t.Errorf("no credential-at-the-door record naming the credential in %v", recs)
	}
}

// A reply holding a credential, in one chunk or split across two, is
// replaced by the fixed failure text; its files never go.
func TestDoorReplacesReplyHoldingCredential(t *testing.T) {
	long := strings.Repeat("a", chunk.ChunkLimit-len(planted)/2) + planted + " tail"
	tests := []struct {
		name  string
		text  string
		files []rtsandbox.File
	}{
		{"in-the-text", "here it is: " + planted, outFiles},
		{"split-across-two-chunks", long, nil},
		// The cut closes the code block at the end of one chunk and
		// reopens it in the next: joined chunks hold fence lines inside
		// the key, the guest's screen does not.
		{"split-inside-a-code-block", "```\n" + strings.Repeat("x", chunk.ChunkLimit-20) + planted + "\n```", nil},
		{"in-a-file", "see the file", []rtsandbox.File{{Name: "a.txt", Data: []byte("x " + planted)}}},
		{"in-a-file-name", "see the file", []rtsandbox.File{{Name: planted + ".txt", Data: []byte("x")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, seen := doorHarness(t)
			h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: true, Text: tt.text}, nil
			}
			h.rt.Files = func(turnCall) []rtsandbox.File { return tt.files }
			if err := h.handle(t, mention(guests, "alice", "Alice", "hi")); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{rtsandbox.TurnFailedOrStoppedText}, h.surface.Sent()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
			wantWithheld(t, h)
			if diff := cmp.Diff([]string{string(guests) + " reply"}, *seen); diff != "" {
				t.Errorf("OnDoor (-want +got):\n%s", diff)
			}
		})
	}
}

// A clean reply passes the door unchanged, with its files, after one
// check of the whole text.
func TestDoorLetsCleanReplyPass(t *testing.T) {
	h, seen := doorHarness(t)
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: "all fine"}, nil
	}
	h.rt.Files = func(turnCall) []rtsandbox.File { return outFiles }
	if err := h.handle(t, mention(guests, "alice", "Alice", "hi")); err != nil {
		t.Fatal(err)
	}
	got := h.surface.Deliveries()
	if len(got) != 1 || got[0].Chunk != "all fine" || len(got[0].Files) != len(outFiles) || len(*seen) != 0 {
		t.Errorf("delivered %+v, OnDoor %v; want the reply and its files", got, *seen)
	}
}

// A preview whose text so far holds a credential is not shown, nor any
// after it; the reply, checked too, is the failure text.
func TestDoorStopsPreviewHoldingCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, seen := doorHarness(t)
		h.surface.previews = true
		h.rt.Turn = streamingRun([]textStep{
			{0, 1, "Hello "},
			{2 * PreviewInterval, 1, "the key is " + planted},
			{2 * PreviewInterval, 1, " and more"},
		}, "the key is "+planted)
		m := mention(guests, "alice", "Alice", "hi")
		m.ID = "m1"
		if err := <-h.submit(m); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var kinds []string
		for _, d := range h.surface.Deliveries() {
			kinds = append(kinds, string(d.Kind)+" "+d.Chunk)
		}
		want := []string{"preview Hello ", "reply " + rtsandbox.TurnFailedOrStoppedText}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("deliveries (-want +got):\n%s", diff)
		}
		wantWithheld(t, h)
		if diff := cmp.Diff([]string{string(guests) + " preview", string(guests) + " reply"}, *seen); diff != "" {
			t.Errorf("OnDoor (-want +got):\n%s", diff)
		}
	})
}

// A report (research) holding a credential posts the failure text.
func TestDoorReplacesReport(t *testing.T) {
	h, seen := doorHarness(t)
	if err := h.r.PostReport(context.Background(), guests, "Report: "+planted); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{rtsandbox.TurnFailedOrStoppedText}, h.surface.Sent()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	wantWithheld(t, h)
	if diff := cmp.Diff([]string{string(guests) + " report"}, *seen); diff != "" {
		t.Errorf("OnDoor (-want +got):\n%s", diff)
	}
}

// An owner command's answer holding a credential (here through the usage
// line) is answered with the fixed command-failed text.
func TestDoorReplacesCommandAnswer(t *testing.T) {
	h, seen := doorHarness(t, func(o *Options) {
		o.Usage = func(context.Context, rtsandbox.ChannelKey) string { return "usage " + planted }
	})
	text, err := h.r.Command(context.Background(), ownerCmd(guests, ActionStatus))
	if text != rtsandbox.CommandFailedText || !errors.Is(err, rtsandbox.ErrCredential) {
		t.Errorf("status = %q, %v; want the command-failed text and ErrCredential", text, err)
	}
	wantWithheld(t, h)
	if diff := cmp.Diff([]string{string(guests) + " command"}, *seen); diff != "" {
		t.Errorf("OnDoor (-want +got):\n%s", diff)
	}
}
