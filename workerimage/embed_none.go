//go:build !embedworker

package workerimage

// embeddedWorker is empty in builds without the embedworker tag (go test,
// go run, go install); WorkerBinary then looks beside the executable or
// compiles the worker from the checkout.
var embeddedWorker []byte
