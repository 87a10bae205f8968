package worker

// MCPFunctionName is mcpFunctionName for the package's external tests,
// which drive a turn through the real broker and must name the model's
// tool calls as the worker declares them.
var MCPFunctionName = mcpFunctionName
