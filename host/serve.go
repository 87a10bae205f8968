package host

import (
	"context"
	"errors"
	"time"
)

// Serve runs a host built from o until ctx ends, then drains it: running
// turns may finish for drain, or until force is closed (a second SIGINT
// or SIGTERM), and are then cancelled. It returns what New, Run or Close
// failed with.
func Serve(ctx context.Context, o Options, drain time.Duration, force <-chan struct{}) error {
	h, err := New(ctx, o)
	if err != nil {
		return err
	}
	runErr := h.Run(ctx)
	h.log.Info("draining", "drain", drain.String())
	dctx, cancel := context.WithTimeout(context.Background(), drain) // never from the cancelled ctx (habit 14)
	defer cancel()
	go func() { // ends with dctx at the latest
		select {
		case <-force:
			h.log.Warn("second signal: cancelling running turns now")
			cancel()
		case <-dctx.Done():
		}
	}()
	return errors.Join(runErr, h.Close(dctx))
}
