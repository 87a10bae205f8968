// Command hostile is a PID 1 that ignores SIGTERM and SIGINT and never
// exits: the turn deadline must still end it (spec §3.5).
package main

import (
	"os/signal"
	"syscall"
	"time"
)

func main() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for {
		time.Sleep(time.Hour)
	}
}
