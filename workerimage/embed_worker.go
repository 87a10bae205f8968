//go:build embedworker

package workerimage

import _ "embed" // the worker binary becomes part of the host binary

// embeddedWorker is the static worker that `make build` writes to
// workerimage/rtsandbox-worker before building the host with -tags embedworker,
// so an installed host binary can build the image without a toolchain.
//
//go:embed rtsandbox-worker
var embeddedWorker []byte
