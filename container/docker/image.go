package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"
)

// ErrImageBuild marks a failed image build; the text carries the builder's
// own error message for the operator.
var ErrImageBuild = errors.New("image build failed")

// ImageExists reports whether ref is present locally. Errors wrap
// container.ErrEngine.
func (d *Driver) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := d.api.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, engineErr("inspect image", err)
}

// BuildImage builds and tags an image from an in-memory context: files maps
// context paths to contents and must hold a "Dockerfile". The Dockerfile is
// stored with mode 0644 and every other entry with 0755, because the
// context only carries the Dockerfile and static executables such as the
// worker. The classic builder is used and the base is never pulled, so a
// "FROM scratch" Dockerfile needs no registry. The builder's output is read
// to the end; its error messages are returned wrapped in ErrImageBuild.
func (d *Driver) BuildImage(ctx context.Context, tag string, files map[string][]byte) error {
	if _, ok := files["Dockerfile"]; !ok || tag == "" || strings.HasPrefix(tag, "-") {
		return fmt.Errorf("%w: need a tag and a Dockerfile", ErrImageBuild)
	}
	buildContext, err := tarContext(files)
	if err != nil {
		return err
	}
	res, err := d.api.ImageBuild(ctx, buildContext, client.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		// No layer cache: the build is one COPY of a small binary, and a
		// cached intermediate image shared with another build can be
		// removed under it ("unknown parent image ID") when that build's
		// image is deleted.
		NoCache: true,
		Version: build.BuilderV1,
	})
	if err != nil {
		return engineErr("build image", err)
	}
	defer res.Body.Close()
	if err := readBuildOutput(res.Body); err != nil {
		return err
	}
	// The stream can end without an error message when the daemon drops
	// the connection; only the tag's presence proves the build.
	if ok, err := d.ImageExists(ctx, tag); err != nil || !ok {
		return fmt.Errorf("%w: %s is missing after the build (%v)", ErrImageBuild, tag, err)
	}
	return nil
}

// tarContext writes files as a tar archive in name order, so the same files
// give the same context bytes.
func tarContext(files map[string][]byte) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == "" || path.Clean(name) != name || path.IsAbs(name) || strings.HasPrefix(name, "../") || name == ".." {
			return nil, fmt.Errorf("%w: bad context path %q", ErrImageBuild, name)
		}
		mode := int64(0o755)
		if name == "Dockerfile" {
			mode = 0o644
		}
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(files[name])), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// readBuildOutput drains the builder's JSON message stream and returns the
// first error it reports.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var buildErr error
	for {
		var msg jsonstream.Message
		err := dec.Decode(&msg)
		if errors.Is(err, io.EOF) {
			return buildErr
		}
		if err != nil {
			return engineErr("read build output", err)
		}
		if msg.Error != nil && buildErr == nil {
			buildErr = fmt.Errorf("%w: %s", ErrImageBuild, strings.TrimSpace(msg.Error.Message))
		}
	}
}

// RemoveImage force-removes an image; a missing image is not an error.
// Errors wrap container.ErrEngine.
func (d *Driver) RemoveImage(ctx context.Context, ref string) error {
	_, err := d.api.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return engineErr("remove image", err)
	}
	return nil
}
