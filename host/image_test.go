package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// Issue 21: only the default tag is this project's by name; any other
// tag holding a foreign image is refused with an error that names the
// key, the rule and the way out, and wraps workerimage.ErrForeign. (The
// real-engine tests are cmd's TestForeignImageNeverReplaced and
// workerimage's TestIntegrationEnsureCurrentForeign.)
func TestForeignImageRule(t *testing.T) {
	for tag, want := range map[string]bool{
		config.DefaultImage:       true,
		"rtsandbox-worker:latest": false,
		"rtsandbox-worker":        false,
		"ubuntu:22.04":            false,
	} {
		if got := ownTag(tag); got != want {
			t.Errorf("ownTag(%q) = %v; want %v", tag, got, want)
		}
	}
	err := foreignImage(ImageKey, "ubuntu:22.04")
	if !errors.Is(err, workerimage.ErrForeign) {
		t.Errorf("foreignImage = %v; want ErrForeign wrapped", err)
	}
	for _, want := range []string{"sandbox.image: ", "ubuntu:22.04 carries no rtsandbox.worker.sha256 label",
		"rebuilds only an image it built or the default tag " + config.DefaultImage, "rtsandbox image build --tag ubuntu:22.04"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("foreignImage = %q; want it to say %q", err, want)
		}
	}
}
