// Package kubeclient is the Kubernetes API client that serve, doctor and
// the cluster tests share: the typed clients of the API groups they call
// and nothing else.
//
// client-go's Clientset holds a client, and its apply configurations, for
// each of the fifty-odd built-in API groups and versions. rtsandbox calls
// five of them, and every package a binary imports is compiled, vetted and
// analysed by staticcheck on a new machine. Built with the race detector on
// an empty build cache, the whole Clientset took 117 CPU-seconds and these
// clients 99. Set is the subset, built the way the Clientset builds its
// clients: one HTTP client and one rate limiter for all of them.
package kubeclient

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/discovery"
	authzv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingv1 "k8s.io/client-go/kubernetes/typed/networking/v1"
	nodev1 "k8s.io/client-go/kubernetes/typed/node/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Set is a client of one cluster for the API groups rtsandbox calls. Its
// methods are named as client-go's Clientset names them, so that a
// Clientset satisfies any interface written against a Set's methods.
type Set struct {
	core       corev1.CoreV1Interface
	networking networkingv1.NetworkingV1Interface
	node       nodev1.NodeV1Interface
	authz      authzv1.AuthorizationV1Interface
	discovery  discovery.DiscoveryInterface
}

// New is the client of rc's cluster, made as client-go's NewForConfig
// makes a Clientset: a user agent when rc has none, and one rate limiter
// shared by every group when rc sets QPS.
func New(rc *rest.Config) (*Set, error) {
	c, hc, err := Config(rc)
	if err != nil {
		return nil, err
	}
	return NewWith(c, hc)
}

// NewWith is the client of c's cluster over hc: c and hc as Config made
// them.
func NewWith(c *rest.Config, hc *http.Client) (*Set, error) {
	var s Set
	var err error
	if s.core, err = corev1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.networking, err = networkingv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.node, err = nodev1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.authz, err = authzv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.discovery, err = discovery.NewDiscoveryClientForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	return &s, nil
}

// Config is rc as a Set's clients use it, and the HTTP client they share:
// a caller that needs a group the Set lacks (a test's RBAC client) makes
// it from these, so that it shares the connections and the rate limit.
func Config(rc *rest.Config) (*rest.Config, *http.Client, error) {
	c := rest.CopyConfig(rc)
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, nil, fmt.Errorf("kubernetes client: burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, hc, nil
}

// CoreV1 is the core group's client: Pods, Namespaces, Nodes,
// PersistentVolumeClaims and the rest.
func (s *Set) CoreV1() corev1.CoreV1Interface { return s.core }

// NetworkingV1 is the networking group's client: NetworkPolicies.
func (s *Set) NetworkingV1() networkingv1.NetworkingV1Interface { return s.networking }

// NodeV1 is the node group's client: RuntimeClasses.
func (s *Set) NodeV1() nodev1.NodeV1Interface { return s.node }

// AuthorizationV1 is the authorization group's client:
// SelfSubjectAccessReviews.
func (s *Set) AuthorizationV1() authzv1.AuthorizationV1Interface { return s.authz }

// Discovery is the discovery client: the server's version and the
// resources each group serves.
func (s *Set) Discovery() discovery.DiscoveryInterface { return s.discovery }
