package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

// runBackup is `rtsandbox backup --config FILE DIR`: a consistent copy of
// the state into DIR (new or empty), beside a running serve (host.Backup,
// docs/operations.md "Backup and restore").
func runBackup(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox backup"
	fs := cli.NewFlagSet(name, stderr)
	cfg, dir, code, ok := backupArgs(fs, name, args, stderr)
	if !ok {
		return code
	}
	r, err := host.Backup(ctx, cfg, dir, time.Now())
	if err != nil {
		return cli.Fail(stderr, name, exitFail, err)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(stdout, "skipped %s\n", s)
	}
	var size int64
	for _, f := range r.Manifest.Files {
		size += f.Size
	}
	fmt.Fprintf(stdout, "backed up %d file(s), %d bytes, into %s\n", len(r.Manifest.Files), size, dir)
	if len(r.Unread) > 0 {
		for _, u := range r.Unread {
			fmt.Fprintf(stderr, "%s: not backed up: %s\n", name, u)
		}
		return cli.Fail(stderr, name, exitFail, fmt.Sprintf("the backup holds everything else; %d channel(s) of conversations are missing from it", len(r.Unread)))
	}
	return exitOK
}

// runRestore is `rtsandbox restore --config FILE [--force] DIR`: with
// serve stopped, the backup in DIR is checked whole, then written into
// the state dir (host.Restore).
func runRestore(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox restore"
	fs := cli.NewFlagSet(name, stderr)
	force := fs.Bool("force", false, "move the state dir's current state aside (kept, never deleted) instead of refusing to restore over it")
	cfg, dir, code, ok := backupArgs(fs, name, args, stderr)
	if !ok {
		return code
	}
	r, err := host.Restore(ctx, cfg, dir, *force, time.Now())
	for _, a := range r.Aside {
		fmt.Fprintf(stdout, "moved the earlier state aside to %s\n", a)
	}
	if err != nil {
		return cli.Fail(stderr, name, exitFail, err)
	}
	fmt.Fprintf(stdout, "restored %d file(s) of the backup of %s into %s\n", len(r.Manifest.Files),
		r.Manifest.Created.Format(time.RFC3339), cfg.StateDir)
	return exitOK
}

// backupArgs parses --config and the one DIR (flags before or after it)
// and loads the config.
func backupArgs(fs *flag.FlagSet, name string, args []string, stderr io.Writer) (*config.Config, string, int, bool) {
	configPath := fs.String("config", "", "config file; its state_dir and session.party_dir hold the state (required)")
	pos, err := cli.ParseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, "", exitOK, false
	case err != nil:
		return nil, "", exitUsage, false // the flag set named the flag
	}
	if len(pos) != 1 || pos[0] == "" {
		err = errors.New("exactly one backup directory DIR is required")
	}
	if err = cli.FirstError(cli.MissingFlag(fs, "config"), err); err != nil {
		return nil, "", cli.Fail(stderr, name, exitUsage, err), false
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return nil, "", cli.Fail(stderr, name, exitUsage, err), false
	}
	return cfg, pos[0], exitOK, true
}
