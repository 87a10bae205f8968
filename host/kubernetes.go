package host

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	sandboxclient "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/kubernetes"
	"github.com/rtsandbox/rtsandbox/internal/kubeclient"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SealedPoolName is the name of the installation's agent-sandbox warm pool
// of sealed workers (and of its SandboxTemplate).
const SealedPoolName = "rtsandbox-sealed"

// kubeSetupTimeout bounds the engine's setup calls at start (the
// NetworkPolicy, the warm pool).
const kubeSetupTimeout = 30 * time.Second

// KubeConfig is the client configuration of cfg's cluster: the kubeconfig
// file kubernetes.kubeconfig names, else the in-cluster configuration of
// a serve running in a Pod.
func KubeConfig(cfg *config.Config) (*rest.Config, error) {
	k := cfg.Kubernetes
	if k == nil {
		return nil, errors.New("engine: kubernetes needs the kubernetes block")
	}
	if k.Kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes.kubeconfig %s: %w", k.Kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: no kubernetes.kubeconfig and not in a cluster: %w", err)
	}
	return rc, nil
}

// kubeOptions are the engine's options of cfg.
func kubeOptions(cfg *config.Config) kubernetes.Options {
	k := cfg.Kubernetes
	return kubernetes.Options{Namespace: k.Namespace, Installation: InstallationID(cfg),
		RuntimeClasses: k.RuntimeClasses, Broker: k.BrokerAddress, ListenPort: k.BrokerListenPort(), EphemeralMB: k.EphemeralMB,
		SessionClaim: k.SessionClaim, SessionRoot: k.SessionRoot}
}

// KubeEngine is engine: kubernetes as serve runs it: the sealed engine,
// and what the session engine shares with it: the core/v1 client, the
// broker's network listener (its token table, and its address and CA as
// workers reach it) and the engine's options.
type KubeEngine struct {
	Sealed   *kubernetes.Sealed
	core     corev1client.CoreV1Interface
	tokens   *broker.Tokens
	listener wire.BrokerHello // the address and CA; each token is its own
	opts     kubernetes.Options
}

// brokerTLS is the network listener's TLS configuration, nil without
// kubernetes.broker.tls_cert: the key pair is read from its files at every
// handshake (a secret is read on every use, never cached), so a renewed
// certificate takes effect without a restart.
func brokerTLS(k *config.Kubernetes) *tls.Config {
	if k.TLSCert == "" {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(k.TLSCert, k.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("kubernetes.broker.tls_cert: %w", err)
			}
			return &c, nil
		}}
}

// KubernetesEngine builds the engine of engine: kubernetes: the broker's
// network listener with its token table, the sealed engine, the workers'
// NetworkPolicy, and, when pool is set (serve) and kubernetes.pool.sealed
// is above 0, the agent-sandbox warm pool of spec's workers. Its closer
// stops the sealed engine (waiting for its deletions) and then the
// listener.
func KubernetesEngine(ctx context.Context, cfg *config.Config, spec container.Spec, pool bool, log *slog.Logger) (*KubeEngine, func(), error) {
	k := cfg.Kubernetes
	rc, cs, err := kubeClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	att, err := kubernetes.NewAPIAttacher(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes attach: %w", err)
	}
	var ca []byte
	if k.TLSCA != "" {
		if ca, err = os.ReadFile(k.TLSCA); err != nil {
			return nil, nil, fmt.Errorf("kubernetes.broker.tls_ca: %w", err)
		}
	}
	tokens := broker.NewTokens()
	ln, err := broker.ListenNet(k.BrokerListen, tokens, broker.NetOptions{
		ListenOptions: broker.ListenOptions{Logger: log}, TLS: brokerTLS(k)})
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes.broker.listen: %w", err)
	}
	o := kubeOptions(cfg)
	eng, err := kubernetes.NewSealed(cs.CoreV1(), att, tokens, string(ca), o)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	closeFn := func() {
		eng.Close()
		ln.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, kubeSetupTimeout)
	defer cancel()
	if err := ensurePolicy(ctx, cs.NetworkingV1(), o); err != nil {
		closeFn()
		return nil, nil, err
	}
	if pool && k.SealedPool > 0 {
		if err := useWarmPool(ctx, rc, eng, spec, int32(k.SealedPool)); err != nil {
			closeFn()
			return nil, nil, err
		}
	}
	return &KubeEngine{Sealed: eng, core: cs.CoreV1(), tokens: tokens, opts: o,
		listener: wire.BrokerHello{Broker: o.Broker.String(), CA: string(ca)}}, closeFn, nil
}

// ensurePolicy creates the workers' NetworkPolicy or updates it to o's.
func ensurePolicy(ctx context.Context, networking networkingv1client.NetworkingV1Interface, o kubernetes.Options) error {
	pol, err := kubernetes.WorkerPolicy(o)
	if err != nil {
		return err
	}
	api := networking.NetworkPolicies(o.Namespace)
	_, err = api.Create(ctx, pol, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := api.Get(ctx, pol.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec, cur.Labels = pol.Spec, pol.Labels
			_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("kubernetes: network policy %s: %w", pol.Name, err)
	}
	return nil
}

// useWarmPool puts the warm pool of size workers under spec in place and
// has eng claim from it.
func useWarmPool(ctx context.Context, rc *rest.Config, eng *kubernetes.Sealed, spec container.Spec, size int32) error {
	ext, err := extclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	sbx, err := sandboxclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	cl, err := eng.NewClaims(ext, sbx, SealedPoolName, size, spec)
	if err != nil {
		return err
	}
	if err := cl.Ensure(ctx); err != nil {
		return fmt.Errorf("kubernetes.pool.sealed: %w", err)
	}
	eng.UseClaims(cl)
	return nil
}

// poolSpec is the spec every sealed turn of cfg gets but for its name and
// run directory, which no Pod field carries: the warm pool's template.
func poolSpec(cfg *config.Config, uid, gid int, limits container.Limits) (container.Spec, error) {
	labels, err := container.TurnLabels(InstallationID(cfg))
	if err != nil {
		return container.Spec{}, err
	}
	return container.Spec{Name: container.PoolName(), Image: ImageTag(cfg), UID: uid, GID: gid,
		RunDir: "/run/rtsandbox-pool", Limits: limits, Labels: labels, Runtime: cfg.SealedRuntime()}, nil
}

// reapKubernetes removes what a crash of serve left on the cluster: the
// installation's sealed worker Pods and warm-pool claims (`rtsandbox
// reap`; no serve runs, so no turn is under way).
func reapKubernetes(ctx context.Context, cfg *config.Config) (int, error) {
	rc, cs, err := kubeClient(cfg)
	if err != nil {
		return 0, err
	}
	eng, err := kubernetes.NewSealed(cs.CoreV1(), nil, broker.NewTokens(), "", kubeOptions(cfg))
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	if cfg.Kubernetes.SealedPool > 0 {
		ext, err := extclient.NewForConfig(rc)
		if err != nil {
			return 0, err
		}
		spec, err := poolSpec(cfg, 1, 1, container.Limits{MemoryMB: 64, CPUs: 1, PIDs: 64, WorkspaceMB: 1})
		if err != nil {
			return 0, err
		}
		cl, err := eng.NewClaims(ext, nil, SealedPoolName, 0, spec)
		if err != nil {
			return 0, err
		}
		eng.UseClaims(cl)
	}
	return eng.Reap(ctx, InstallationID(cfg))
}

// kubeClient is the client of cfg's cluster.
func kubeClient(cfg *config.Config) (*rest.Config, *kubeclient.Set, error) {
	rc, err := KubeConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubeclient.New(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return rc, cs, nil
}

// kubeSessionContainers is the offline remover of the channels' Pods
// (SessionMode's Containers on engine: kubernetes), nil when cfg has no
// kubernetes.session: without it no session Pod of the installation is
// made, and none is looked for.
func kubeSessionContainers(cfg *config.Config) (SessionContainers, error) {
	if cfg.Kubernetes == nil || cfg.Kubernetes.SessionClaim == "" {
		return nil, nil
	}
	_, cs, err := kubeClient(cfg)
	if err != nil {
		return nil, err
	}
	s, err := kubernetes.NewSessions(cs.CoreV1(), kubeOptions(cfg))
	if err != nil {
		return nil, err
	}
	return newOfflineSessions(cfg, s), nil
}

// sessions is the session engine on e's cluster: one Pod per channel.
func (e *KubeEngine) sessions() (*kubernetes.Sessions, error) {
	return kubernetes.NewSessions(e.core, e.opts)
}

// sessionBroker puts a channel's broker, listening on socket, behind the
// network listener (kubernetes.SessionBroker): the channel's token in the
// hello file beside the socket, handed to the worker by handOver, and a
// token of its own for each turn.
func (e *KubeEngine) sessionBroker(core kubernetes.SessionCore, socket string, handOver func(string) error) (*kubernetes.SessionBroker, error) {
	return kubernetes.NewSessionBroker(core, e.tokens, e.listener, socket, filepath.Dir(socket), handOver)
}
