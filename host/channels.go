package host

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/channels"
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
	log.Warn(ChannelDriftText, "not_stored", notStored, "not_in_initial_channels", notListed)
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
