package kubernetes

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// Streams are one attach's ends: the worker's stdin, read to EOF and then
// closed (the Pod's container has stdinOnce, so the worker sees EOF), and
// the sinks of its stdout and stderr.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// An Attacher connects to a running Pod's worker. Attach returns when the
// worker's output ended (it exited), ctx ended, or the stream broke.
type Attacher interface {
	Attach(ctx context.Context, pod *corev1.Pod, s Streams) error
}

// APIAttacher attaches through the API server's attach subresource: the
// API server authenticates and authorises the call (RBAC: create on
// pods/attach), and the kubelet carries the bytes. It speaks WebSocket and
// falls back to SPDY for an API server that does not.
type APIAttacher struct {
	config *rest.Config
	rest   rest.Interface
}

// NewAPIAttacher is the attacher of config's cluster.
func NewAPIAttacher(config *rest.Config) (*APIAttacher, error) {
	core, err := corev1client.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &APIAttacher{config: config, rest: core.RESTClient()}, nil
}

// Attach streams s to and from pod's worker container.
func (a *APIAttacher) Attach(ctx context.Context, pod *corev1.Pod, s Streams) error {
	u := a.rest.Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: WorkerContainer, Stdin: true, Stdout: true, Stderr: true},
			scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(a.config, "GET", u.String())
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(a.config, "POST", u)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr})
}
