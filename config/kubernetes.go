package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/subpath"
)

// The engines a config may name (engine).
const (
	EngineDocker     = "docker"
	EngineKubernetes = "kubernetes"
)

// Kubernetes is the kubernetes block: where the engine of engine:
// kubernetes runs its workers and how they reach the broker
// (docs/kubernetes.md, "Configuration").
type Kubernetes struct {
	// Kubeconfig is the kubeconfig file's path; "" means the in-cluster
	// configuration of a serve running in a Pod.
	Kubeconfig string
	// Namespace holds every object of the installation.
	Namespace string
	// RuntimeClasses maps runc and runsc to RuntimeClass names; an
	// absent entry takes the engine's default (runc: the cluster's
	// default handler, runsc: "gvisor").
	RuntimeClasses map[string]string
	// BrokerListen is where serve's broker listens for workers
	// (host:port, BrokerListenPort its port); BrokerAddress is what
	// workers dial: an IP address and a port (workers resolve no names),
	// the destination their NetworkPolicy allows.
	BrokerListen  string
	BrokerAddress netip.AddrPort
	// TLSCert and TLSKey are the listener's certificate and key files,
	// both or neither; TLSCA is the PEM file workers verify it with.
	TLSCert, TLSKey, TLSCA string
	// SealedPool is the size of the agent-sandbox warm pool of sealed
	// workers; 0 runs each sealed turn in a Pod of its own.
	SealedPool int
	// EphemeralMB bounds what a worker may write outside its
	// memory-backed volumes; 0 means the engine's default.
	EphemeralMB int
	// SessionClaim names the PersistentVolumeClaim that holds the session
	// channels' directories, and SessionRoot is where serve sees that
	// volume's root: session.party_dir lies under it, and each channel's
	// Pod mounts its run and workspace directories from the claim by
	// their paths below it (kubernetes.session; docs/kubernetes.md,
	// "Session channels"). Both "" without a session profile.
	SessionClaim, SessionRoot string
}

// IsKubernetes reports engine: kubernetes.
func (c *Config) IsKubernetes() bool { return c.Engine == EngineKubernetes }

// MaxEphemeralMB bounds kubernetes.ephemeral_mb.
const MaxEphemeralMB = 1 << 20

// engine reads engine and the kubernetes block, which belongs to
// engine: kubernetes alone.
func (p *parser) engine(o object, c *Config) {
	c.Engine = EngineDocker
	if v, ok := p.text(o, "engine", false, engineRule); ok {
		c.Engine = v
	}
	n := o.get("kubernetes")
	switch {
	case c.Engine == EngineKubernetes && n == nil:
		p.fail(o.node, "kubernetes", "required with engine: kubernetes (at least namespace and broker)")
	case c.Engine != EngineKubernetes && n != nil:
		p.fail(n, "kubernetes", "is only used with engine: kubernetes")
	case n != nil:
		c.Kubernetes = p.kubernetes(n)
	}
}

func engineRule(s string) string {
	if s != EngineDocker && s != EngineKubernetes {
		return fmt.Sprintf("must be one of %q", []string{EngineDocker, EngineKubernetes})
	}
	return ""
}

func (p *parser) kubernetes(n *yaml.Node) *Kubernetes {
	k := &Kubernetes{}
	o, ok := p.object(n, "kubernetes", "kubeconfig", "namespace", "runtime_classes", "broker", "pool", "ephemeral_mb", "session")
	if !ok {
		return k
	}
	k.Kubeconfig, _ = p.text(o, "kubeconfig", false, absPathRule)
	k.Namespace, _ = p.text(o, "namespace", true, dnsLabelRule)
	if rc := o.get("runtime_classes"); rc != nil {
		k.RuntimeClasses = p.runtimeClasses(rc, o.at("runtime_classes"))
	}
	if b := o.get("broker"); b != nil {
		p.kubernetesBroker(b, o.at("broker"), k)
	} else {
		p.fail(o.node, o.at("broker"), "required: the address workers dial (broker.address) and where serve listens (broker.listen)")
	}
	if pl := o.get("pool"); pl != nil {
		if po, ok := p.object(pl, o.at("pool"), "sealed"); ok {
			k.SealedPool = p.integer(po, "sealed", 0, 0, MaxPoolSize)
		}
	}
	k.EphemeralMB = p.integer(o, "ephemeral_mb", 0, 1, MaxEphemeralMB)
	if sn := o.get("session"); sn != nil {
		if so, ok := p.object(sn, o.at("session"), "claim", "root"); ok {
			k.SessionClaim, _ = p.text(so, "claim", true, claimRule)
			k.SessionRoot, _ = p.text(so, "root", true, cleanAbsPathRule)
		}
	}
	return k
}

func claimRule(s string) string {
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return "must be a PersistentVolumeClaim name (a DNS-1123 subdomain): " + errs[0]
	}
	return ""
}

func cleanAbsPathRule(s string) string {
	if !filepath.IsAbs(s) || filepath.Clean(s) != s || s == "/" {
		return "must be an absolute, clean path other than /"
	}
	return ""
}

// runtimeClasses reads kubernetes.runtime_classes: runtime → RuntimeClass
// name ("" for the cluster's default handler).
func (p *parser) runtimeClasses(n *yaml.Node, path string) map[string]string {
	o, ok := p.object(n, path, container.Runtimes()...)
	if !ok {
		return nil
	}
	m := map[string]string{}
	for _, rt := range container.Runtimes() {
		if o.get(rt) == nil {
			continue
		}
		if v, ok := p.text(o, rt, false, runtimeClassRule); ok {
			m[rt] = v
		}
	}
	return m
}

func (p *parser) kubernetesBroker(n *yaml.Node, path string, k *Kubernetes) {
	o, ok := p.object(n, path, "listen", "address", "tls_cert", "tls_key", "tls_ca")
	if !ok {
		return
	}
	k.BrokerListen, _ = p.text(o, "listen", true, listenRule)
	if s, ok := p.text(o, "address", true, brokerAddressRule); ok {
		k.BrokerAddress = netip.MustParseAddrPort(s)
	}
	k.TLSCert, _ = p.text(o, "tls_cert", false, absPathRule)
	k.TLSKey, _ = p.text(o, "tls_key", false, absPathRule)
	k.TLSCA, _ = p.text(o, "tls_ca", false, absPathRule)
	if (k.TLSCert == "") != (k.TLSKey == "") || (k.TLSCert == "") != (k.TLSCA == "") {
		p.fail(n, path, "tls_cert, tls_key and tls_ca go together: all three for TLS, none for plain TCP")
	}
}

func dnsLabelRule(s string) string {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return "must be a DNS-1123 label: " + errs[0]
	}
	return ""
}

func runtimeClassRule(s string) string {
	if s == "" {
		return ""
	}
	if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
		return "must be a RuntimeClass name (a DNS-1123 subdomain) or \"\" for the cluster's default: " + errs[0]
	}
	return ""
}

func absPathRule(s string) string {
	if !filepath.IsAbs(s) {
		return "must be an absolute path"
	}
	return ""
}

// brokerAddressRule wants what a worker can dial without a name: an IP
// address (not unspecified) and a port.
func brokerAddressRule(s string) string {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
		return "must be an IP address and a port that workers can reach, such as \"10.0.0.5:7443\" (workers resolve no names)"
	}
	return ""
}

// kubernetesModes checks what session profiles need of engine:
// kubernetes (docs/kubernetes.md, "Session channels"): the claim that
// holds the channels' directories, with session.party_dir on it, and a
// soft disk bound (auto means soft there): a hard bound mounts a
// filesystem on the host that a Pod mounting the claim would not see.
func (p *parser) kubernetesModes(c *Config) {
	k := c.Kubernetes
	if !c.IsKubernetes() || k == nil || !c.UsesSessions() {
		if k != nil && k.SessionClaim != "" {
			p.fail(nil, "kubernetes.session", "is only used with a profile of mode: session")
		}
		return
	}
	if k.SessionClaim == "" && k.SessionRoot == "" {
		p.fail(nil, "kubernetes.session", "required with a profile of mode: session: the claim holding the channels' directories (claim) and where serve sees it (root)")
		return
	}
	if k.SessionRoot != "" && !subpath.Below(k.SessionRoot, c.Session.PartyDir) {
		p.fail(nil, "session.party_dir", "must lie under kubernetes.session.root (%s), on the claim the channels' Pods mount; it is %s", k.SessionRoot, c.Session.PartyDir)
	}
	switch c.Session.Disk.Mode {
	case DiskHard:
		p.fail(nil, "session.disk.mode", "hard is not available with engine: kubernetes (its filesystem would be mounted on serve's host, where a Pod does not see it); use soft or auto")
	case DiskAuto:
		c.Session.Disk.Mode = DiskSoft
	}
}

// BrokerListenPort is BrokerListen's port, where a Service forwards
// workers when serve runs in the cluster; 0 if BrokerListen has none
// (the parser's listenRule refuses such a config).
func (k *Kubernetes) BrokerListenPort() uint16 {
	_, port, err := net.SplitHostPort(k.BrokerListen)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}
