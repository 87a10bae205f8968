package k8stest

// The control plane is started here rather than through controller-runtime's
// envtest. envtest brought 181 packages (controller-runtime and the informers
// and listers of every API group) into every test binary of the tier: about
// 96 CPU-seconds of race-instrumented compiling on a new machine, and again
// in vet and staticcheck. What the tier needs from it is small: a CA, etcd
// and the kube-apiserver with their flags, the CRDs applied, and client
// certificates for users. Its directories also outlived a killed test
// binary under /tmp; these live under the cluster's own directory.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the cluster's one CA: it signs the API server's serving
// certificate and every user's client certificate (--client-ca-file).
type pki struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	certPE []byte
}

func newPKI() (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rtsandbox-k8stest-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pki{cert: cert, key: key, certPE: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// ecKeyPEM is a new P-256 key in PEM.
func ecKeyPEM() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// issue signs a certificate for cn in groups (the subject's organizations,
// which the API server reads as the user's groups); serving makes it the
// API server's, for 127.0.0.1 and localhost.
func (p *pki) issue(cn string, groups []string, serving bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if serving {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// freePort is a loopback port nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startControlPlane starts etcd and the kube-apiserver from tools/bin with
// RBAC on, client-certificate authentication, kubeadm's service range
// and c.apiFlags over the defaults, waits until the API server is ready,
// applies the CRDs under tools/crds and waits until they are served. It
// sets c.Config to an administrator's (system:masters).
func (c *Cluster) startControlPlane(ctx context.Context, tools string) error {
	pkiDir := filepath.Join(c.dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		return err
	}
	ca, err := newPKI()
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	c.ca = ca
	servingCert, servingKey, err := ca.issue("kube-apiserver", nil, true)
	if err != nil {
		return err
	}
	// The service-account signing key: the API server both signs and
	// verifies tokens with it.
	saKey, err := ecKeyPEM()
	if err != nil {
		return err
	}
	files := map[string][]byte{"ca.crt": ca.certPE, "apiserver.crt": servingCert, "apiserver.key": servingKey, "sa.key": saKey}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(pkiDir, name), b, 0o600); err != nil {
			return err
		}
	}
	etcdPort, err := freePort()
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	if err := c.run("etcd", filepath.Join(tools, "bin", "etcd"), "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL, "--listen-peer-urls=http://127.0.0.1:0"); err != nil {
		return err
	}
	apiPort, err := freePort()
	if err != nil {
		return err
	}
	flags := map[string]string{
		"etcd-servers":                     etcdURL,
		"bind-address":                     "127.0.0.1",
		"advertise-address":                "127.0.0.1",
		"secure-port":                      strconv.Itoa(apiPort),
		"tls-cert-file":                    filepath.Join(pkiDir, "apiserver.crt"),
		"tls-private-key-file":             filepath.Join(pkiDir, "apiserver.key"),
		"client-ca-file":                   filepath.Join(pkiDir, "ca.crt"),
		"service-account-issuer":           "https://kubernetes.default.svc.cluster.local",
		"service-account-key-file":         filepath.Join(pkiDir, "sa.key"),
		"service-account-signing-key-file": filepath.Join(pkiDir, "sa.key"),
		"authorization-mode":               "RBAC",
		// No controller creates the default ServiceAccount here, and the
		// engine's Pods mount no token.
		"disable-admission-plugins": "ServiceAccount",
		"service-cluster-ip-range":  serviceRange,
	}
	maps.Copy(flags, c.apiFlags)
	var args []string
	for _, k := range slices.Sorted(maps.Keys(flags)) {
		args = append(args, "--"+k+"="+flags[k])
	}
	if err := c.run("kube-apiserver", filepath.Join(tools, "bin", "kube-apiserver"), args...); err != nil {
		return err
	}
	c.Config = &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(apiPort), TLSClientConfig: rest.TLSClientConfig{CAData: ca.certPE}}
	if c.Config, err = c.userConfig("rtsandbox-admin", "system:masters"); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	return c.applyCRDs(ctx, filepath.Join(tools, "crds"))
}

// userConfig is c.Config for name in groups, on a client certificate the
// cluster's CA signs.
func (c *Cluster) userConfig(name string, groups ...string) (*rest.Config, error) {
	cert, key, err := c.ca.issue(name, groups, false)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.CertData, cfg.KeyData = cert, key
	return cfg, nil
}

// kubeconfig renders cfg as a kubeconfig file's bytes.
func kubeconfig(cfg *rest.Config, user string) ([]byte, error) {
	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"k8stest": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}},
		Contexts:       map[string]*clientcmdapi.Context{"k8stest": {Cluster: "k8stest", AuthInfo: user}},
		CurrentContext: "k8stest",
	})
}

// waitReady returns once the API server's /readyz answers ok. It asks
// every 100 ms (readiness has no event to watch), and fails at once when
// etcd or the API server exits.
func (c *Cluster) waitReady(ctx context.Context) error {
	client, err := rest.UnversionedRESTClientFor(withJSON(c.Config))
	if err != nil {
		return err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		body, err := client.Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		if exit := c.exited(); exit != nil {
			return exit
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready: %w (last: %v)\n%s", ctx.Err(), err, c.LogTail("kube-apiserver"))
		}
	}
}

// withJSON is cfg with what a REST client without a typed scheme needs.
func withJSON(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/json"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg
}

// applyCRDs creates every CustomResourceDefinition in the YAML files of
// dir and waits until each is established.
func (c *Cluster) applyCRDs(ctx context.Context, dir string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	client, err := rest.UnversionedRESTClientFor(withJSON(c.Config))
	if err != nil {
		return err
	}
	const crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	var names []string
	for _, p := range paths {
		docs, err := yamlDocs(p)
		if err != nil {
			return err
		}
		for _, doc := range docs {
			var meta struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			if err := json.Unmarshal(doc, &meta); err != nil || meta.Metadata.Name == "" {
				return fmt.Errorf("%s: a document without a name: %v", p, err)
			}
			if err := client.Post().AbsPath(crds).Body(doc).Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create CRD %s: %w", meta.Metadata.Name, err)
			}
			names = append(names, meta.Metadata.Name)
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for _, name := range names {
		for !c.established(ctx, client, crds+"/"+name) {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
			}
		}
	}
	return nil
}

// established reports whether the CRD at path has condition Established.
func (c *Cluster) established(ctx context.Context, client *rest.RESTClient, path string) bool {
	body, err := client.Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return false
	}
	var crd struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal(body, &crd) != nil {
		return false
	}
	return slices.ContainsFunc(crd.Status.Conditions, func(cond struct{ Type, Status string }) bool {
		return cond.Type == "Established" && cond.Status == "True"
	})
}

// yamlDocs splits a YAML file into its documents, as JSON.
func yamlDocs(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var docs [][]byte
	for {
		var doc json.RawMessage
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 && string(doc) != "null" {
			docs = append(docs, doc)
		}
	}
}

// serviceRange is the cluster's Service range: kubeadm's, where
// deploy/kubernetes' fixed broker ClusterIP lives.
const serviceRange = "10.96.0.0/12"
