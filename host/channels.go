package host

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
)

// channelStoreExists reports whether the state directory holds a channel
// store: serve checks it before opening the store, because a store that
// does not exist yet is seeded from initial_channels (the first start).
func channelStoreExists(stateDir string) bool {
	_, err := os.Lstat(filepath.Join(stateDir, channels.StateFile))
	return err == nil
}

// ChannelDriftText is the warning when initial_channels and the stored set
// differ after the first start.
const ChannelDriftText = "initial_channels differs from the stored channel set and is ignored: it seeds only the very first start; " +
	"change channels with the owner commands (sandbox on/off) or rtsandbox channels on|off while serve is stopped"

// warnChannelDrift logs one WARN line naming the keys when initial is
// set and differs from stored: keys listed but not stored (added to the
// config later, or switched off since) and stored keys not listed
// (switched on since). An empty initial_channels states no intent and is
// not compared.
func warnChannelDrift(log *slog.Logger, initial, stored []rtsandbox.ChannelKey) {
	if len(initial) == 0 {
		return
	}
	notStored := missingKeys(initial, stored)
	notListed := missingKeys(stored, initial)
	if len(notStored) == 0 && len(notListed) == 0 {
		return
	}
	log.Warn(ChannelDriftText, "not_stored", notStored, "not_in_initial_channels", notListed,
		"enable_with", enableCommands(notStored))
}

// enableCommands names, for each key, the command that enables it while
// serve is stopped (the owner command "on" does it in the running host).
func enableCommands(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "rtsandbox channels on " + k + " --config FILE"
	}
	return out
}

// missingKeys returns the keys of want that have is lacks, in want's order.
func missingKeys(want, have []rtsandbox.ChannelKey) []string {
	out := []string{}
	for _, k := range want {
		if !slices.Contains(have, k) {
			out = append(out, string(k))
		}
	}
	return out
}

// ErrStoreInUse refuses to change the channel store while a running serve
// holds it: its owner commands are the way to change a live host (they
// wait behind the channel's queued turns).
var ErrStoreInUse = errors.New("in use by a running rtsandbox serve; change channels through its owner commands, or stop it first")

// SetChannel switches sandbox routing of key on or off in the stored set
// and reports whether it is now on. It needs the store's lock.
func SetChannel(cfg *config.Config, key rtsandbox.ChannelKey, on bool) (bool, error) {
	store, err := channels.Open(cfg.StateDir, cfg.InitialChannels)
	if errors.Is(err, channels.ErrLocked) {
		return false, fmt.Errorf("state_dir %s is %w", cfg.StateDir, ErrStoreInUse)
	}
	if err != nil {
		return false, err
	}
	defer store.Close()
	if on {
		err = store.Enable(key)
	} else {
		err = store.Disable(key)
	}
	return store.Enabled(key), err
}

// StoredChannels reads the stored set without the lock, so it works beside
// a running server. Before the first start nothing is stored: the keys are
// then what that start will seed, and unseeded is true.
func StoredChannels(cfg *config.Config) (keys []rtsandbox.ChannelKey, unseeded bool, err error) {
	keys, err = channels.Read(cfg.StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return cfg.InitialChannels, true, nil
	}
	return keys, false, err
}
