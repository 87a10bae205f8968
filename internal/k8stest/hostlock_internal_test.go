package k8stest

import (
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"
)

// Two holders of the real tier's host lock take turns: the second waits
// while the first holds it, gets it once the first lets go (which removed
// the file: a waiter on the removed file takes the new one), and the
// file is gone once the last lets go, so the tier leaves nothing on the
// host.
func TestHostLockTakesTurns(t *testing.T) {
	first, err := lockHost()
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan *os.File, 1)
	go func() {
		f, err := lockHost()
		if err != nil {
			t.Error(err)
		}
		second <- f
	}()
	select {
	case <-second:
		t.Fatal("the second holder got the lock while the first held it")
	case <-time.After(200 * time.Millisecond):
	}
	if err := unlockHost(first); err != nil {
		t.Fatal(err)
	}
	var f *os.File
	select {
	case f = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the second holder did not get the lock once the first let go")
	}
	if f == nil {
		return
	}
	held, err := f.Stat()
	now, serr := os.Stat(hostLock)
	if err != nil || serr != nil || !os.SameFile(held, now) {
		t.Errorf("the second holder's lock is not the file at %s: %v, %v", hostLock, err, serr)
	}
	if err := unlockHost(f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hostLock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after the last holder let go: %v; want it gone", hostLock, err)
	}
}
