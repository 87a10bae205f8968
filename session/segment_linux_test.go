package session

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// In hard mode the earlier directory's workspace image moves with it: it
// is unmounted from the earlier path before the move (its container
// removed first) and mounted at the new one by the next turn, with the
// files it held.
func TestSegmentMigrationHardImage(t *testing.T) {
	f := hardFixture(t)
	ctx := context.Background()
	const ch = "http:a.b"
	old := legacyRoot(t, f, ch)
	if err := f.rt.s.attachWorkspace(ctx, ch, old); err != nil {
		t.Fatal(err)
	}
	if !mounted(t, filepath.Join(old, workspaceName)) {
		t.Fatal("the earlier workspace is not mounted")
	}
	writeFile(t, filepath.Join(old, workspaceName, "notes.txt"), 5)
	if _, err := f.turnIn(ctx, ch, "a"); err != nil {
		t.Fatalf("turn = %v", err)
	}
	root := filepath.Join(f.party, Segment(ch))
	ws := filepath.Join(root, workspaceName)
	if !mounted(t, ws) {
		t.Error("the moved workspace is not mounted at its new path")
	}
	if mounted(t, filepath.Join(old, workspaceName)) {
		t.Error("a mount was left at the earlier path")
	}
	if data, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || len(data) != 5 {
		t.Errorf("the image's files did not move with it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, imageName)); err != nil {
		t.Errorf("the image file did not move: %v", err)
	}
	if err := f.rt.Remove(ctx, ch); err != nil {
		t.Fatal(err)
	}
}
