package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// session.container_prefix on a real daemon: a container named under the
// longest prefix (a 91-byte name) is created and runs; after a prefix
// change, ReapStrays removes the channel's container of the old prefix
// and keeps the current one.
func TestIntegrationSessionContainerPrefix(t *testing.T) {
	needDocker(t)
	ctx := context.Background()
	d := newSessionDriver(integ.cli)
	old := sessionSpec(t) // the default prefix; removed when t ends
	longest := "p" + strings.Repeat("-", 39) + "9"
	cur := old
	cur.Name = rtcontainer.PrefixedSessionName(longest, integ.installation, old.Channel)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Remove(ctx, cur.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// Only this test's channel moves to the new prefix; any other session
	// container of the run keeps its default name.
	name := func(ch string) string {
		if ch == old.Channel {
			return cur.Name
		}
		return rtcontainer.SessionName(integ.installation, ch)
	}
	ensureFromMissing(ctx, t, d, old)
	if n, err := d.ReapStrays(ctx, integ.installation, name); err != nil || n != 1 {
		t.Fatalf("ReapStrays = %d, %v; want the old prefix's container removed", n, err)
	}
	if st, err := d.Status(ctx, old.Name); err != nil || st.State != rtcontainer.StateMissing {
		t.Errorf("old container after ReapStrays = %+v, %v; want missing", st, err)
	}
	ensureFromMissing(ctx, t, d, cur)
	if n, err := d.ReapStrays(ctx, integ.installation, name); err != nil || n != 0 {
		t.Errorf("ReapStrays = %d, %v; want the current container kept", n, err)
	}
	if st, err := d.Status(ctx, cur.Name); err != nil || st.State != rtcontainer.StateRunning {
		t.Errorf("current container = %+v, %v; want running", st, err)
	}
}
