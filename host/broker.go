package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// BrokerOptions are one hand-run turn's broker: where it listens, what it
// is bound to and its call budget.
type BrokerOptions struct {
	Socket   string
	Channel  rtsandbox.ChannelKey
	Speaker  rtsandbox.Speaker
	MaxCalls int
	// Announce is told "listening on …" once the socket accepts calls.
	Announce func(string)
}

// ErrSetup marks a ServeBroker failure before it listened, or a Turn's
// before it ran: the config or the options were refused (a usage error
// to a command line).
var ErrSetup = errors.New("broker setup")

// setupError keeps the cause's text and matches ErrSetup.
type setupError struct{ err error }

func (e setupError) Error() string        { return e.err.Error() }
func (e setupError) Unwrap() []error      { return []error{e.err, ErrSetup} }
func (e setupError) Is(target error) bool { return target == ErrSetup }

// ServeBroker serves one turn's broker on a Unix socket until ctx ends,
// for running the sealed worker by hand (`rtsandbox broker`).
func ServeBroker(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, o BrokerOptions) error {
	bc, err := BrokerConfig(ctx, cfg, getenv, upstream.New(nil), log)
	if err != nil {
		return setupError{err}
	}
	bc.MaxCalls = o.MaxCalls
	bc.Intake = decodeIntake(cfg)
	b, err := broker.New(bc)
	if err != nil {
		return setupError{err}
	}
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := broker.Listen(o.Socket, b.Turn(turnCtx, rtsandbox.Binding{Channel: o.Channel, Speaker: o.Speaker}), broker.ListenOptions{Logger: log})
	if err != nil {
		return err
	}
	if o.Announce != nil {
		o.Announce(fmt.Sprintf("listening on %s for channel %s (%d calls)", o.Socket, o.Channel, o.MaxCalls))
	}
	<-ctx.Done()
	cancel()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}
