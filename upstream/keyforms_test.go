package upstream

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

// KeyForms made once decide every check as forms made per check do, tell
// their own key from another, hold back as much as the longest form of
// Forms needs, and never print the key.
func TestKeyFormsAgreeWithFormsMadePerCheck(t *testing.T) {
	for _, key := range append([]string{""}, refKeys...) {
		k := NewKeyForms(key)
		hold := 0
		if key != "" {
			for _, f := range Forms(key) {
				hold = max(hold, len(f)-1)
			}
		}
		if k.Hold() != hold {
			t.Errorf("NewKeyForms(%q).Hold() = %d, want %d", key, k.Hold(), hold)
		}
		if !k.For(key) || k.For(key+"x") || key != "" && k.For("") {
			t.Errorf("NewKeyForms(%q).For answers wrong", key)
		}
		for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%#v", k), fmt.Sprintf("%+v", k)} {
			if key != "" && strings.Contains(s, key) {
				t.Errorf("a print of KeyForms holds the key: %q", s)
			}
		}
		for _, body := range [][]byte{
			[]byte(`{"a":"` + jsonContent(key) + `"}`),
			[]byte(`{"a":"x` + strings.Repeat(`\\n`, 700) + jsonContent(key) + `"}`),
			answercorpus.Answer(answercorpus.Markdown, 70<<10),
		} {
			valid, hit := scanWith(body, k.matcher())
			wantValid, wantHit := scan(body, searchForms(key))
			if valid != wantValid || hit != wantHit {
				t.Errorf("scan with KeyForms(%q) = %v, %v; per check %v, %v", key, valid, hit, wantValid, wantHit)
			}
			if got, want := k.TextChecker().Check(string(body)), CheckText(string(body), key); got != want {
				t.Errorf("KeyForms(%q).TextChecker().Check = %v, CheckText = %v", key, got, want)
			}
		}
	}
}

// One KeyForms shared by concurrent checks (the calls of a session turn):
// the filters are built once, and under -race nothing is written twice.
func TestKeyFormsSharedByConcurrentChecks(t *testing.T) {
	k := NewKeyForms(formKey)
	clean := answercorpus.Answer(answercorpus.ToolCalls, 80<<10)
	reflected := []byte(`{"a":"` + strings.Repeat("filler ", 300) + jsonContent(formKey) + `"}`)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				if _, hit := scanWith(clean, k.matcher()); hit {
					t.Error("clean answer reflected")
				}
				if _, hit := scanWith(reflected, k.matcher()); !hit {
					t.Error("reflected answer passed")
				}
				if k.TextChecker().Check(string(reflected[i:])) == nil {
					t.Error("reflected text passed")
				}
			}
		})
	}
	wg.Wait()
}
