package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

// runBackup is `rtsandbox backup --config FILE DIR`: a consistent copy of
// the state into DIR (new or empty), beside a running serve (host.Backup,
// docs/operations.md "Backup and restore").
func runBackup(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	st := newSetup("rtsandbox backup", stderr, "")
	cfg, _, code, ok := st.Load(args, getenv, stderr, nil, 0, func() error { return oneDir(st.FS.Args()) })
	if !ok {
		return code
	}
	dir := st.FS.Arg(0)
	r, err := host.Backup(ctx, cfg, dir, time.Now())
	if err != nil {
		return cli.Fail(stderr, "rtsandbox backup", exitFail, err)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(stdout, "skipped %s\n", s)
	}
	var size int64
	for _, f := range r.Manifest.Files {
		size += f.Size
	}
	fmt.Fprintf(stdout, "backed up %d file(s), %d bytes, into %s\n", len(r.Manifest.Files), size, dir)
	return exitOK
}

// runRestore is `rtsandbox restore --config FILE [--force] DIR`: with
// serve stopped, the backup in DIR is checked whole, then written into
// the state dir (host.Restore).
func runRestore(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	st := newSetup("rtsandbox restore", stderr, "")
	force := st.FS.Bool("force", false, "move the state dir's current state aside (never deleted) instead of refusing to restore over it")
	cfg, _, code, ok := st.Load(args, getenv, stderr, nil, 0, func() error { return oneDir(st.FS.Args()) })
	if !ok {
		return code
	}
	dir := st.FS.Arg(0)
	r, err := host.Restore(ctx, cfg, dir, *force, time.Now())
	for _, a := range r.Aside {
		fmt.Fprintf(stdout, "moved the earlier state aside to %s\n", a)
	}
	if err != nil {
		return cli.Fail(stderr, "rtsandbox restore", exitFail, err)
	}
	fmt.Fprintf(stdout, "restored %d file(s) of the backup of %s into %s\n", len(r.Manifest.Files),
		r.Manifest.Created.Format(time.RFC3339), cfg.StateDir)
	return exitOK
}

// oneDir requires exactly one positional argument, the backup directory,
// after the flags.
func oneDir(args []string) error {
	if len(args) != 1 || args[0] == "" {
		return errors.New("exactly one backup directory is required after the flags (DIR)")
	}
	return nil
}
