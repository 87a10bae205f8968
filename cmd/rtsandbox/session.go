// Session mode's wiring: the one place this binary says how the session
// runtime (serve) and the offline session-container remover (reap,
// channels off) are built.

package main

import "github.com/rtsandbox/rtsandbox/host"

// sessions builds session mode for the host. Its zero value serves sealed
// profiles only: serve refuses a config with a session profile, and reap
// and channels off leave session containers alone.
func sessions() host.Sessions { return host.Sessions{} }
