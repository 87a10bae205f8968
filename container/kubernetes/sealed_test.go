package kubernetes

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// TestTurnEndMarkBesideTheStreamsEnd: a worker that writes its reply and
// end mark and returns ends its attach stream at once, so a turn that
// looks after both finds both ready. Its reply is early whichever the
// select took, never a wait for the Pod's exit: kwok's Pods never exit,
// and TestClusterSealedPrestartedTurn, which lost this race under a new
// machine's load, waited out its deadline. Each round makes both ready
// before the turn looks: a turn that took the stream's end half of the
// time would pass all 40 rounds once in a trillion runs.
func TestTurnEndMarkBesideTheStreamsEnd(t *testing.T) {
	f := newAPI(t)
	e, err := NewSealed(f.core, nil, broker.NewTokens(), "", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i := range 40 {
		pod, err := SealedPod(testSpec(t), testOptions())
		if err != nil {
			t.Fatal(err)
		}
		if pod, err = f.core.Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(t.Context())
		a := &attachment{out: container.NewReplyBuffer(), errOut: container.NewTailBuffer(), cancel: cancel,
			attached: make(chan attachEnd, 1), exited: make(chan exitEnd, 1)}
		if _, err := a.out.Write([]byte(`{"ok":true,"text":"done"}` + string(rune(wire.ReplyEnd)))); err != nil {
			t.Fatal(err)
		}
		a.attached <- attachEnd{}
		go func() { // the watch: the Pod runs on until the turn cancels it
			<-actx.Done()
			a.exited <- exitEnd{err: actx.Err()}
		}()
		ctx, stop := context.WithTimeout(t.Context(), 5*time.Second)
		res, err := e.turn(ctx, turnPod{name: pod.Name, pod: pod}, a, container.Result{})
		stop()
		if err != nil || !res.Reply.OK || res.Reply.Text != "done" || res.Settled == nil || res.Replied.IsZero() {
			t.Fatalf("round %d: %+v, %v; want the early reply", i, res, err)
		}
		<-res.Settled
	}
}
