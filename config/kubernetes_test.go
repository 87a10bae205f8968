package config

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const kubeMinimal = minimal + `engine: kubernetes
kubernetes:
  namespace: rtsandbox
  broker: {listen: ":7443", address: "10.0.0.5:7443"}
`

// kubeSession starts a kubernetes.session block under a session profile.
const kubeSession = "profiles: {default: {mode: session}}\n" + kubeMinimal + "  session:\n"

// TestParseKubernetesSession: session profiles on engine: kubernetes get
// the claim and its root, and auto disk bounds are soft.
func TestParseKubernetesSession(t *testing.T) {
	in := kubeMinimal + "  session: {claim: channels, root: /srv/channels}\nprofiles: {default: {mode: session}}\nsession: {party_dir: /srv/channels/party}\n"
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Kubernetes; k.SessionClaim != "channels" || k.SessionRoot != "/srv/channels" {
		t.Errorf("kubernetes.session = %q, %q", k.SessionClaim, k.SessionRoot)
	}
	if c.Session.Disk.Mode != DiskSoft {
		t.Errorf("disk mode %q on kubernetes, want soft", c.Session.Disk.Mode)
	}
}

// TestParseKubernetes: the kubernetes block, whole, and its defaults.
func TestParseKubernetes(t *testing.T) {
	full := minimal + `engine: kubernetes
kubernetes:
  kubeconfig: /etc/rtsandbox/kubeconfig
  namespace: agents
  runtime_classes: {runsc: gvisor-fast, runc: ""}
  broker:
    listen: 0.0.0.0:7443
    address: 10.96.0.10:7443
    tls_cert: /etc/rtsandbox/broker.crt
    tls_key: /etc/rtsandbox/broker.key
    tls_ca: /etc/rtsandbox/ca.crt
  pool: {sealed: 3}
  ephemeral_mb: 128
`
	tests := []struct {
		name, in string
		want     *Kubernetes
	}{
		{"minimal", kubeMinimal, &Kubernetes{Namespace: "rtsandbox", BrokerListen: ":7443",
			BrokerAddress: netip.MustParseAddrPort("10.0.0.5:7443")}},
		{"full", full, &Kubernetes{Kubeconfig: "/etc/rtsandbox/kubeconfig", Namespace: "agents",
			RuntimeClasses: map[string]string{"runsc": "gvisor-fast", "runc": ""},
			BrokerListen:   "0.0.0.0:7443", BrokerAddress: netip.MustParseAddrPort("10.96.0.10:7443"),
			TLSCert: "/etc/rtsandbox/broker.crt", TLSKey: "/etc/rtsandbox/broker.key", TLSCA: "/etc/rtsandbox/ca.crt",
			SealedPool: 3, EphemeralMB: 128}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !c.IsKubernetes() {
				t.Errorf("engine %q", c.Engine)
			}
			if diff := cmp.Diff(tt.want, c.Kubernetes, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("kubernetes (-want +got):\n%s", diff)
			}
		})
	}
	c, err := Parse([]byte(minimal))
	if err != nil || c.Engine != EngineDocker || c.Kubernetes != nil {
		t.Errorf("default engine = %q, %+v, %v; want docker without a block", c.Engine, c.Kubernetes, err)
	}
}

// TestParseKubernetesErrors: each key's rule, named.
func TestParseKubernetesErrors(t *testing.T) {
	checkParseErrors(t, []errorTest{
		{"engine-unknown", minimal + "engine: podman\n", []string{`engine: must be one of ["docker" "kubernetes"]`}},
		{"block-missing", minimal + "engine: kubernetes\n", []string{"kubernetes: required with engine: kubernetes"}},
		{"block-without-engine", minimal + "kubernetes: {namespace: x}\n", []string{"kubernetes: is only used with engine: kubernetes"}},
		{"namespace-missing", minimal + "engine: kubernetes\nkubernetes: {broker: {listen: \":1\", address: \"10.0.0.1:1\"}}\n",
			[]string{"kubernetes.namespace: is required"}},
		{"namespace-bad", minimal + "engine: kubernetes\nkubernetes: {namespace: Bad_NS, broker: {listen: \":1\", address: \"10.0.0.1:1\"}}\n",
			[]string{"kubernetes.namespace: must be a DNS-1123 label"}},
		{"broker-missing", minimal + "engine: kubernetes\nkubernetes: {namespace: a}\n", []string{"kubernetes.broker: required"}},
		{"broker-name", minimal + "engine: kubernetes\nkubernetes: {namespace: a, broker: {listen: \":1\", address: \"broker.svc:7443\"}}\n",
			[]string{"kubernetes.broker.address: must be an IP address and a port"}},
		{"broker-unspecified", minimal + "engine: kubernetes\nkubernetes: {namespace: a, broker: {listen: \":1\", address: \"0.0.0.0:7443\"}}\n",
			[]string{"kubernetes.broker.address: must be an IP address and a port"}},
		{"listen-bad", minimal + "engine: kubernetes\nkubernetes: {namespace: a, broker: {listen: \"7443\", address: \"10.0.0.1:1\"}}\n",
			[]string{"kubernetes.broker.listen: must be host:port"}},
		{"tls-half", kubeMinimal[:len(kubeMinimal)-len("  broker: {listen: \":7443\", address: \"10.0.0.5:7443\"}\n")] +
			"  broker: {listen: \":7443\", address: \"10.0.0.5:7443\", tls_cert: /a.crt}\n",
			[]string{"kubernetes.broker: tls_cert, tls_key and tls_ca go together"}},
		{"kubeconfig-relative", kubeMinimal + "  kubeconfig: kube.conf\n", []string{"kubernetes.kubeconfig: must be an absolute path"}},
		{"runtime-class-unknown-runtime", kubeMinimal + "  runtime_classes: {kata: kata}\n", []string{"kubernetes.runtime_classes.kata: unknown key"}},
		{"runtime-class-bad", kubeMinimal + "  runtime_classes: {runsc: Not_A_Name}\n", []string{"kubernetes.runtime_classes.runsc: must be a RuntimeClass name"}},
		{"pool-over", kubeMinimal + "  pool: {sealed: 65}\n", []string{"kubernetes.pool.sealed: must be an integer of at most 64"}},
		{"pool-session", kubeMinimal + "  pool: {session: 1}\n", []string{"kubernetes.pool.session: unknown key"}},
		{"ephemeral-zero", kubeMinimal + "  ephemeral_mb: 0\n", []string{"kubernetes.ephemeral_mb: must be an integer of at least 1"}},
		{"session-block-missing", kubeMinimal + "profiles: {default: {mode: session}}\n",
			[]string{"kubernetes.session: required with a profile of mode: session"}},
		{"session-block-unused", kubeMinimal + "  session: {claim: channels, root: /srv/channels}\n",
			[]string{"kubernetes.session: is only used with a profile of mode: session"}},
		{"session-claim-bad", kubeSession + "    claim: Not_A_Claim\n    root: /var/lib\n",
			[]string{"kubernetes.session.claim: must be a PersistentVolumeClaim name"}},
		{"session-root-relative", kubeSession + "    claim: channels\n    root: srv/channels\n",
			[]string{"kubernetes.session.root: must be an absolute, clean path"}},
		{"session-root-unclean", kubeSession + "    claim: channels\n    root: /srv/channels/\n",
			[]string{"kubernetes.session.root: must be an absolute, clean path"}},
		{"session-claim-missing", kubeSession + "    root: /var/lib\n",
			[]string{"kubernetes.session.claim: is required"}},
		{"party-dir-off-the-claim", kubeSession + "    claim: channels\n    root: /srv/channels\nsession: {party_dir: /srv/other}\n",
			[]string{"session.party_dir: must lie under kubernetes.session.root (/srv/channels)"}},
		{"party-dir-is-the-root", kubeSession + "    claim: channels\n    root: /srv/channels\nsession: {party_dir: /srv/channels}\n",
			[]string{"session.party_dir: must lie under kubernetes.session.root"}},
		{"party-dir-beside-the-root", kubeSession + "    claim: channels\n    root: /srv/channels\nsession: {party_dir: /srv/channels2/party}\n",
			[]string{"session.party_dir: must lie under kubernetes.session.root"}},
		{"disk-hard", kubeSession + "    claim: channels\n    root: /srv/channels\nsession: {party_dir: /srv/channels/party, disk: {mode: hard}}\n",
			[]string{"session.disk.mode: hard is not available with engine: kubernetes"}},
	})
}
