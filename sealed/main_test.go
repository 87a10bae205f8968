package sealed

import (
	"os"
	"testing"
	_ "time/tzdata" // zone checks must not depend on the test host's zoneinfo

	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m, setupIntegration, &integ.skip)) }
