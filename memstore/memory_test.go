package memstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// step is one memory call and what it must answer.
type step struct {
	as          rtsandbox.Binding
	tool, input string
	want        string // the answer, when err is nil
	err         error
}

func runSteps(t *testing.T, s *Store, steps []step) {
	t.Helper()
	for i, st := range steps {
		got, err := call(s, st.as, st.tool, st.input)
		if st.err != nil {
			if !errors.Is(err, st.err) {
				t.Errorf("step %d %s %s as %s = %q, %v; want %v", i, st.tool, st.input, st.as.Speaker.ID, got, err, st.err)
			}
			continue
		}
		if err != nil || got != st.want {
			t.Errorf("step %d %s %s as %s = %q, %v; want %q", i, st.tool, st.input, st.as.Speaker.ID, got, err, st.want)
		}
	}
}

// TestCallSemantics is the reference's memory tests and docs/protocol.md, "Memory tools", on the host: namespaces,
// ordering, keys and texts as data, and refusals that keep the state.
func TestCallSemantics(t *testing.T) {
	a, b := bind(chanA, alice), bind(chanA, bob)
	aOther := bind(chanB, alice)
	tests := []struct {
		name  string
		steps []step
	}{
		{"namespaces", []step{
			// The reference's tests: an extra speaker argument is ignored.
			{a, "memory_set", `{"scope":"speaker","key":"drink","text":"Tea","speaker":"victim"}`, "Saved.", nil},
			{b, "memory_get", `{"scope":"speaker"}`, "[]", nil},
			{aOther, "memory_get", `{"scope":"speaker"}`, "[]", nil},
			{a, "memory_set", `{"scope":"channel","key":"meeting","text":"Wednesday"}`, "Saved.", nil},
			{b, "memory_get", `{"scope":"channel","query":"wednesday"}`, `[{"key":"meeting","text":"Wednesday"}]`, nil},
			{a, "memory_get", `{"scope":"speaker","key":"drink"}`, `[{"key":"drink","text":"Tea"}]`, nil},
			{a, "memory_remove", `{"scope":"speaker","key":"drink"}`, "Forgotten.", nil},
			{a, "memory_get", `{"scope":"speaker"}`, "[]", nil},
			{a, "memory_get", `{"scope":"channel"}`, `[{"key":"meeting","text":"Wednesday"}]`, nil},
		}},
		{"same-key-per-speaker", []step{
			{a, "memory_set", `{"scope":"speaker","key":"drink","text":"Tea"}`, "Saved.", nil},
			{b, "memory_set", `{"scope":"speaker","key":"drink","text":"Milk"}`, "Saved.", nil},
			{a, "memory_get", `{"scope":"speaker"}`, `[{"key":"drink","text":"Tea"}]`, nil},
			{b, "memory_get", `{"scope":"speaker"}`, `[{"key":"drink","text":"Milk"}]`, nil},
			{b, "memory_remove", `{"scope":"speaker","key":"drink"}`, "Forgotten.", nil},
			{a, "memory_get", `{"scope":"speaker"}`, `[{"key":"drink","text":"Tea"}]`, nil},
		}},
		{"update-moves-to-end", []step{
			{a, "memory_set", `{"scope":"channel","key":"  a  ","text":"  first  "}`, "Saved.", nil},
			{a, "memory_set", `{"scope":"channel","key":"b","text":"` + strings.Repeat("😀", 1024) + `"}`, "Saved.", nil},
			{a, "memory_set", `{"scope":"channel","key":"a","text":"second"}`, "Saved.", nil},
			{b, "memory_get", `{"scope":"channel"}`, `[{"key":"b","text":"` + strings.Repeat("😀", 1024) + `"},{"key":"a","text":"second"}]`, nil},
			{b, "memory_get", `{"scope":"channel","key":7,"query":"SEC"}`, `[{"key":"a","text":"second"}]`, nil},
			{b, "memory_get", `{"scope":"channel","query":"a sec"}`, `[{"key":"a","text":"second"}]`, nil},
			{b, "memory_remove", `{"scope":"channel","key":"missing"}`, "Forgotten.", nil},
			{a, "memory_set", `{"scope":"channel","key":"c","text":"  untrimmed  "}`, "Saved.", nil},
			{b, "memory_get", `{"scope":"channel","key":" c "}`, `[{"key":"c","text":"  untrimmed  "}]`, nil},
		}},
		{"values-are-data", []step{
			{bind(chanA, rtsandbox.Speaker{ID: "../../person", PrincipalID: "discord:../../person"}), "memory_set",
				`{"scope":"speaker","key":"../../host","text":"plain data"}`, "Saved.", nil},
			{bind(chanA, rtsandbox.Speaker{ID: "../../person", PrincipalID: "discord:../../person"}), "memory_get",
				`{"scope":"speaker","key":"../../host"}`, `[{"key":"../../host","text":"plain data"}]`, nil},
			{a, "memory_set", `{"scope":"channel","key":"html","text":"<b> & \u2028"}`, "Saved.", nil},
			{a, "memory_get", `{"scope":"channel","key":"html"}`, "[{\"key\":\"html\",\"text\":\"<b> & \u2028\"}]", nil},
		}},
		{"refusals-keep-state", []step{
			{a, "memory_set", `{"scope":"channel","key":"k","text":"t"}`, "Saved.", nil},
			{a, "memory_set", `{"scope":"owner","key":"x","text":"x"}`, "", wire.ErrMemoryScope},
			{a, "memory_set", `{"scope":"speaker:bob","key":"x","text":"x"}`, "", wire.ErrMemoryScope},
			{a, "memory_set", `{"scope":"channel","key":"x","text":"` + strings.Repeat("x", 2049) + `"}`, "", wire.ErrMemoryText},
			{a, "memory_set", `{"scope":"channel","key":"x","text":"` + strings.Repeat("😀", 1025) + `"}`, "", wire.ErrMemoryText},
			{a, "memory_set", `{"scope":"channel","key":"` + strings.Repeat("k", 129) + `","text":"t"}`, "", wire.ErrMemoryKey},
			{a, "memory_set", `{"scope":"channel","key":"` + strings.Repeat("😀", 65) + `","text":"t"}`, "", wire.ErrMemoryKey},
			{a, "memory_remove", `{"scope":"channel"}`, "", wire.ErrMemoryNoKey},
			{a, "bash", `{"scope":"channel","key":"k"}`, "", wire.ErrMemoryTool},
			{a, "memory_get", `{"scope":"channel"}`, `[{"key":"k","text":"t"}]`, nil},
		}},
		{"speaker-needs-principal", []step{
			{bind(chanA, rtsandbox.Speaker{ID: "anon"}), "memory_set", `{"scope":"speaker","key":"k","text":"t"}`, "", ErrSpeaker},
			{bind(chanA, rtsandbox.Speaker{PrincipalID: "discord:"}), "memory_get", `{"scope":"speaker"}`, "", ErrSpeaker},
			{bind(chanA, rtsandbox.Speaker{ID: "anon"}), "memory_set", `{"scope":"channel","key":"k","text":"t"}`, "Saved.", nil},
		}},
		{"another-principal-same-id", []step{
			// Never from the router (principal = <kind>:<id>); refused,
			// not merged, when a binding says otherwise.
			{a, "memory_set", `{"scope":"speaker","key":"k","text":"t"}`, "Saved.", nil},
			{bind(chanA, rtsandbox.Speaker{ID: "alice", PrincipalID: "http:alice"}), "memory_get", `{"scope":"speaker"}`, "", ErrOwner},
			{bind(chanA, rtsandbox.Speaker{ID: "alice", PrincipalID: "http:alice"}), "memory_set", `{"scope":"speaker","key":"k","text":"x"}`, "", ErrOwner},
			{a, "memory_get", `{"scope":"speaker"}`, `[{"key":"k","text":"t"}]`, nil},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testStore(t, nil)
			runSteps(t, s, tc.steps)
		})
	}
}

// TestCallCapacity: the limits bind per channel, all speakers and notes
// together; a refused change leaves the store as it was, and replacing an
// entry of a full store still works.
func TestCallCapacity(t *testing.T) {
	t.Run("entries", func(t *testing.T) {
		s, _ := testStore(t, nil)
		fill(t, s, 100, "t", 156)
		before := load(t, s, chanA)
		if _, err := call(s, bind(chanA, alice), "memory_set", `{"scope":"speaker","key":"new","text":"t"}`); !errors.Is(err, wire.ErrMemoryCapacity) {
			t.Fatalf("257th set = %v; want ErrMemoryCapacity", err)
		}
		if _, err := call(s, bind(chanA, bob), "memory_set", `{"scope":"channel","key":"new","text":"t"}`); !errors.Is(err, wire.ErrMemoryCapacity) {
			t.Fatalf("257th set by bob = %v; want ErrMemoryCapacity", err)
		}
		if diff := cmp.Diff(before, load(t, s, chanA)); diff != "" {
			t.Errorf("a refused set changed the store (-want +got):\n%s", diff)
		}
		// Another channel has room of its own.
		mustCall(t, s, bind(chanB, alice), "memory_set", `{"scope":"speaker","key":"new","text":"t"}`)
		mustCall(t, s, bind(chanA, bob), "memory_set", `{"scope":"speaker","key":"b0","text":"replaced"}`)
		after := load(t, s, chanA).Memory
		if len(after) != rtsandbox.MaxMemoryEntries || after[len(after)-1] != (rtsandbox.MemoryEntry{Scope: "speaker:bob", Key: "b0", Text: "replaced"}) {
			t.Errorf("replacing in a full store: %d entries, last %+v", len(after), after[len(after)-1])
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// 2,048 CJK characters are 6 KiB of JSON: the 512 KiB bound binds
		// near 85 entries, long before the entry bound.
		s, _ := testStore(t, nil)
		fill(t, s, 40, strings.Repeat("\u4e01", 2048), 40)
		var err error
		n := 80
		for ; err == nil && n < rtsandbox.MaxMemoryEntries; n++ {
			as := []rtsandbox.Binding{bind(chanA, alice), bind(chanA, bob)}[n%2]
			_, err = call(s, as, "memory_set", fmt.Sprintf(`{"scope":"speaker","key":"k%d","text":%q}`, n, strings.Repeat("\u4e01", 2048)))
		}
		mem := load(t, s, chanA).Memory
		if !errors.Is(err, wire.ErrMemoryCapacity) || n > 90 || len(mem) != n-1 {
			t.Errorf("set %d entries, %d kept, last error %v; want the capacity error near 85", n, len(mem), err)
		}
		if size := jsonjs.Size(mem); size > rtsandbox.MaxMemoryBytes {
			t.Errorf("channel memory is %d bytes; want ≤ %d", size, rtsandbox.MaxMemoryBytes)
		}
	})
}

// fill stores entries through sealed turns: bobs of bob's own (b0, b1 …),
// then alices more (a0, a1 …), alice's own and channel notes in turn.
func fill(t *testing.T, s *Store, bobs int, text string, alices int) {
	t.Helper()
	var mem []rtsandbox.MemoryEntry
	for i := range bobs {
		mem = append(mem, rtsandbox.MemoryEntry{Scope: "speaker:bob", Key: fmt.Sprint("b", i), Text: text})
	}
	if err := s.Save(context.Background(), bind(chanA, bob), rtsandbox.ChannelState{Memory: mem}); err != nil {
		t.Fatal(err)
	}
	for i := range alices {
		scope := []string{"speaker:alice", "channel"}[i%2]
		mem = append(mem, rtsandbox.MemoryEntry{Scope: scope, Key: fmt.Sprint("a", i), Text: text})
	}
	if err := s.Save(context.Background(), bind(chanA, alice), rtsandbox.ChannelState{Memory: mem}); err != nil {
		t.Fatal(err)
	}
}

// TestCallIsolation: channels and principals never see each other's
// entries, whatever the input says.
func TestCallIsolation(t *testing.T) {
	s, _ := testStore(t, nil)
	mustCall(t, s, bind(chanA, alice), "memory_set", `{"scope":"speaker","key":"secret","text":"alice in A"}`)
	mustCall(t, s, bind(chanA, alice), "memory_set", `{"scope":"channel","key":"note","text":"note in A"}`)
	mustCall(t, s, bind(chanB, bob), "memory_set", `{"scope":"speaker","key":"secret","text":"bob in B"}`)
	tests := []struct {
		name   string
		as     rtsandbox.Binding
		input  string
		absent []string
	}{
		{"bob-in-A-speaker", bind(chanA, bob), `{"scope":"speaker"}`, []string{"alice in A", "bob in B"}},
		{"bob-in-A-naming-alice", bind(chanA, bob), `{"scope":"speaker","speaker":"alice","principalId":"discord:alice"}`, []string{"alice in A"}},
		{"alice-in-B-speaker", bind(chanB, alice), `{"scope":"speaker"}`, []string{"alice in A", "bob in B"}},
		{"alice-in-B-channel", bind(chanB, alice), `{"scope":"channel"}`, []string{"note in A"}},
		{"bob-in-A-query", bind(chanA, bob), `{"scope":"speaker","query":"alice"}`, []string{"alice in A"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustCall(t, s, tc.as, "memory_get", tc.input)
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("get = %s; holds %q", got, a)
				}
			}
		})
	}
}

// TestConcurrentWriters: goroutines of one store and a second store on the
// same file (another process) write one channel at once; every change is
// kept, none is torn, and no writer fails for the lock.
func TestConcurrentWriters(t *testing.T) {
	s, _ := testStore(t, nil)
	other, err := Open(context.Background(), Options{Path: s.Path()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const writers, each = 8, 12
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		store := []*Store{s, other}[w%2]
		sp := rtsandbox.Speaker{ID: fmt.Sprint("w", w), PrincipalID: fmt.Sprint("discord:w", w)}
		wg.Go(func() {
			for i := range each {
				if _, err := call(store, bind(chanA, sp), "memory_set", fmt.Sprintf(`{"scope":"speaker","key":"k%d","text":"t"}`, i)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := load(t, s, chanA)
	if len(st.Memory) != writers*each {
		t.Errorf("%d entries; want %d", len(st.Memory), writers*each)
	}
	if err := Check(st); err != nil {
		t.Error(err)
	}
}
