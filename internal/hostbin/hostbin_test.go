package hostbin_test

import (
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/hostbin"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

func TestWorkerFileIsWorkerimages(t *testing.T) {
	if hostbin.WorkerFile != workerimage.WorkerFile {
		t.Errorf("hostbin.WorkerFile = %q; want workerimage.WorkerFile %q", hostbin.WorkerFile, workerimage.WorkerFile)
	}
}
