package host

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/rtsandbox/rtsandbox/config"
)

// portChecks checks that serve can listen where the config says: each
// listener's address is bound and let go at once. A port another process
// holds fails with the fix; serve runs the check before anything starts,
// so a taken port refuses the start with its name instead of failing half
// way. (The port can still be taken between the check and serve's bind;
// serve then fails on the bind, naming the key.)
func portChecks(cfg *config.Config) []Check {
	var out []Check
	if cfg.HTTP != nil {
		out = append(out, portCheck("http.listen", cfg.HTTP.Listen))
	}
	if cfg.Metrics != nil {
		out = append(out, portCheck("metrics.listen", cfg.Metrics.Listen))
	}
	return out
}

func portCheck(key, addr string) Check {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		_, port, _ := net.SplitHostPort(addr)
		return fail(key, fmt.Sprintf("stop what listens there (ss -ltnp 'sport = :%s' names it), or choose another %s", port, key),
			"%s is in use by another process (a running rtsandbox serve holds it too)", addr)
	case err != nil:
		return fail(key, fmt.Sprintf("choose an address of this machine for %s", key), "cannot listen on %s: %v", addr, err)
	}
	ln.Close()
	return ok(key, "%s is free", addr)
}
