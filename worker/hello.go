package worker

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/wire"
)

// readHello reads the broker hello line (wire.ReadBrokerHello) and makes
// the network client of it: TLS verified against the hello's CA alone
// when it has one, with the broker's IP address as the name the
// certificate must carry.
func readHello(r *bufio.Reader) (*brokerclient.Network, error) {
	h, err := wire.ReadBrokerHello(r)
	if err != nil {
		return nil, err
	}
	n := &brokerclient.Network{Addr: h.Broker, Token: h.Token}
	if h.CA == "" {
		return n, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(h.CA)) {
		return nil, fmt.Errorf("%w: ca: no PEM certificate", wire.ErrInvalidHello)
	}
	n.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return n, nil
}
