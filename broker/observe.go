package broker

import (
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox/wire"
)

// Route classes of a CallRecord: the kind of route a call aimed at, never
// the path the guest sent.
const (
	RouteModel = "model" // /model or the Anthropic Messages routes
	RouteTools = "tools" // /tools/<name>
	RouteMCP   = "mcp"   // /mcp/<server>
	RouteOther = "other" // anything else
)

// UnknownTool is CallRecord.Tool for a /tools/ or /mcp/ call whose name is
// not declared: a guest-chosen name never leaves the broker.
const UnknownTool = "unknown"

// CallRecord is what one call did, for metrics (Config.Observe). Like the
// audit record it is content-free; unlike it, it names no channel or
// principal, and every string in it is one of a fixed set or an
// operator-declared name.
type CallRecord struct {
	// Route is RouteModel, RouteTools, RouteMCP or RouteOther.
	Route string
	// Tool is the declared host tool (RouteTools) or MCP server (RouteMCP)
	// the call aimed at, UnknownTool for an undeclared name, and "" for
	// the other routes.
	Tool string
	// Status is the HTTP status the worker got.
	Status int
	// Refusal is the refusal class of a non-200 answer ("not_found",
	// "call_failed", …); "" for 200.
	Refusal string
	// Duration is the whole call, as in the audit record.
	Duration time.Duration
	// Upstream is the part spent waiting for the model or MCP answer or
	// in the host tool (a webhook's round trip); 0 when none was made.
	Upstream time.Duration
	// Reflection marks an upstream answer refused because it echoed the
	// credential.
	Reflection bool
}

// observe hands the call's record to the observer. target is the request
// target and matched the path the pipeline routed ("" when it refused the
// call before routing).
func (b *Broker) observe(target, matched string, o outcome, d time.Duration) {
	route, tool := b.classify(target, matched)
	b.cfg.Observe(CallRecord{
		Route: route, Tool: tool, Status: o.status, Refusal: o.class,
		Duration: d, Upstream: o.upstream, Reflection: o.reflected,
	})
}

// classify names the route class and the declared name a call aimed at.
// The matched path decides when there is one; a call refused before
// routing is classified by its target without query or fragment, so a
// refused /tools/x still counts against tools. A name is returned only as
// the operator declared it, never as the guest's bytes.
func (b *Broker) classify(target, matched string) (route, tool string) {
	path := matched
	if path == "" {
		path, _, _ = strings.Cut(target, "?")
		path, _, _ = strings.Cut(path, "#")
	}
	switch path {
	case wire.RouteModel, wire.RouteAnthropicMessages, wire.RouteAnthropicCountTokens:
		return RouteModel, ""
	}
	if name, ok := strings.CutPrefix(path, wire.RouteToolPrefix); ok {
		if h := b.tools[name]; h != nil {
			return RouteTools, h.Spec.Name
		}
		return RouteTools, UnknownTool
	}
	if name, ok := strings.CutPrefix(path, wire.RouteMCPPrefix); ok {
		if s := b.mcp[name]; s != nil {
			return RouteMCP, s.Name
		}
		return RouteMCP, UnknownTool
	}
	return RouteOther, ""
}
