// Command hostile is a PID 1 that ignores SIGTERM and SIGINT and never
// exits: the turn deadline must still end it (docs/sealed-turn.md, "Deadlines and cleanup when the engine is slow, down or wedged").
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
