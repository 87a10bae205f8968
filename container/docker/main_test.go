package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/enginetest"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/internal/hostbin"
)

// integ is the shared state of the integration tests: a client on the local
// daemon, a FROM-scratch image holding the conformance suite's stand-in
// worker (enginetest.WorkerPackage), and an installation id
// that labels every container these tests create.
var integ struct {
	cli          *client.Client
	image        string
	installation string
	skip         string // why integration tests skip; "" when they run
}

// echoDockerfile wraps the static test worker the way the real worker image
// is meant to be built: no base image, no shell, no registry.
const echoDockerfile = `FROM scratch
COPY rtsandbox-worker /rtsandbox-worker
USER 1000:1000
ENTRYPOINT ["/rtsandbox-worker"]
`

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m, setupIntegration, &integ.skip)) }

func setupIntegration() (teardown func() error, err error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := newDriver(cli).Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("daemon unreachable: %w", err)
	}
	binary, err := buildEcho(ctx)
	if err != nil {
		cli.Close()
		return nil, err
	}
	integ.cli, integ.installation = cli, "test-"+randomHex(6)
	integ.image = "rtsandbox-test-echo:" + randomHex(6)
	files := map[string][]byte{"Dockerfile": []byte(echoDockerfile), "rtsandbox-worker": binary}
	if err := newDriver(cli).BuildImage(ctx, integ.image, files); err != nil {
		cli.Close()
		return nil, err
	}
	return teardownIntegration, nil
}

// buildEcho compiles the stand-in worker as a static binary and returns it.
func buildEcho(ctx context.Context) ([]byte, error) {
	dir, err := os.MkdirTemp("", "rtsandbox-echo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "echo")
	if err := hostbin.GoBuild(ctx, ".", nil, "-o", out, enginetest.WorkerPackage); err != nil {
		return nil, fmt.Errorf("build %s: %w", enginetest.WorkerPackage, err)
	}
	return os.ReadFile(out)
}

// teardownIntegration fails if any container of this test run is left, then
// removes the leftovers and the test image.
func teardownIntegration() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer integ.cli.Close()
	var errs []error
	left, err := integ.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("ancestor", integ.image),
	})
	if err != nil {
		return err
	}
	for _, c := range left.Items {
		errs = append(errs, fmt.Errorf("container %v (%s) was left behind", c.Names, c.ID))
		_, _ = integ.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
	errs = append(errs, dockertest.Teardown(ctx, newDriver(integ.cli), integ.installation, integ.image))
	return errors.Join(errs...)
}

// needDocker skips a test when the daemon is unavailable outside CI.
func needDocker(t *testing.T) {
	t.Helper()
	if integ.skip != "" {
		t.Skip(integ.skip)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// turnSpec returns a spec for the echo image with fresh directories owned
// by the container user, labelled with this test run's installation.
func turnSpec(t *testing.T) rtcontainer.Spec {
	t.Helper()
	runDir, workspaceDir := testDirs(t)
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 { // tests run as root: use an unprivileged id and hand it the dirs
		uid, gid = 1000, 1000
		for _, d := range []string{runDir, workspaceDir} {
			if err := os.Chown(d, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	labels, err := rtcontainer.TurnLabels(integ.installation)
	if err != nil {
		t.Fatal(err)
	}
	return rtcontainer.Spec{
		Name: rtcontainer.Name("test:" + t.Name()), Image: integ.image, UID: uid, GID: gid,
		RunDir: runDir, WorkspaceDir: workspaceDir, Limits: rtcontainer.DefaultLimits(), Labels: labels,
	}
}
