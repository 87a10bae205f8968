package config

import (
	"maps"
	"slices"
)

// Credential is a secret the configuration names: the config key that
// names it (what a log line or a check may print) and the environment
// variable that holds it (read with EnvVar.Lookup on every use).
type Credential struct {
	Key string // such as model.api_key_env or mcp.docs.api_key_env
	Var EnvVar
}

// Credentials lists every secret variable c names, in the file's order
// (the models of models: by name), leaving out keys that name none. It is
// the one list of what the host holds: doctor checks each is set, and the
// door (package door) keeps each from leaving for a guest in any form.
// TestCredentialsListsEveryEnvVar fails when a field of type EnvVar is
// added to the configuration without being listed here.
func (c *Config) Credentials() []Credential {
	var out []Credential
	add := func(key string, v EnvVar) {
		if v != "" {
			out = append(out, Credential{Key: key, Var: v})
		}
	}
	add("model.api_key_env", c.Model.APIKeyEnv)
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		add("models."+name+".api_key_env", c.Models[name].APIKeyEnv)
	}
	for _, t := range c.Tools {
		add("tools."+t.Name+".api_key_env", t.APIKeyEnv)
	}
	for _, s := range c.MCP {
		add("mcp."+s.Name+".api_key_env", s.APIKeyEnv)
	}
	if h := c.HTTP; h != nil {
		add("http.token_env", h.TokenEnv)
		add("http.owner_token_env", h.OwnerTokenEnv)
	}
	if d := c.Discord; d != nil {
		add("discord.token_env", d.TokenEnv)
	}
	if s := c.Web.Search; s != nil {
		add("web.search.api_key_env", s.APIKeyEnv)
	}
	return out
}
