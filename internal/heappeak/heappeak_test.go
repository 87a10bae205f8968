package heappeak

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sink []byte

// A live 32 MiB allocation shows in the peak; nothing shows none of it.
func TestOfSeesALiveAllocation(t *testing.T) {
	if got := Of(func() { sink = make([]byte, 32<<20); sink[len(sink)-1] = 1 }); got < 32<<20 {
		t.Errorf("peak of a 32 MiB allocation = %.0f bytes", got)
	}
	sink = nil
	if got := Of(func() {}); got > 8<<20 {
		t.Errorf("peak of nothing = %.0f bytes", got)
	}
}
