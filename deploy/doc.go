// Package deploy holds the files an operator installs rtsandbox serve
// with, and the tests that keep them working: the systemd unit
// (systemd/rtsandbox.service), the Dockerfile and compose example
// (docker/), the Prometheus alert rules (prometheus/) and the Grafana
// dashboard (grafana/). It has no code; docs/operations.md describes each
// file.
package deploy
