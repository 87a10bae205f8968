package host

import (
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/door"
)

// newDoor is the door of every router the host starts: every credential
// the configuration names (config.Credentials: model and named models,
// tools, MCP servers, search, the HTTP API's tokens, the Discord token),
// each read from getenv on every check.
func newDoor(cfg *config.Config, getenv env) *door.Door {
	var secrets []door.Secret
	for _, c := range cfg.Credentials() {
		secrets = append(secrets, door.Secret{Name: c.Key, Read: func() rtsandbox.Secret { return rtsandbox.Secret(c.Var.Lookup(getenv)) }})
	}
	return door.New(secrets)
}
