package worker

import "github.com/rtsandbox/rtsandbox"

// loadHistory turns the history the host passed into context messages,
// each truncated to the history budget. With reset it is ignored (the host
// sends none then).
func loadHistory(history []rtsandbox.HistoryEntry, reset bool) []message {
	if reset {
		return nil
	}
	out := make([]message, 0, len(history))
	for _, h := range history {
		out = append(out, message{Role: h.Role, Content: promptText(h.Content, budgetHistory)})
	}
	return out
}

// nextHistory appends this turn's exchange to the full loaded history
// (including entries the context budget dropped from this turn's calls)
// and keeps the last rtsandbox.MaxHistory messages.
func nextHistory(history []message, userContent, answer string) []rtsandbox.HistoryEntry {
	all := historyEntries(history)
	all = append(all,
		rtsandbox.HistoryEntry{Role: "user", Content: promptText(userContent, budgetHistory)},
		rtsandbox.HistoryEntry{Role: "assistant", Content: promptText(answer, budgetHistory)},
	)
	if len(all) > rtsandbox.MaxHistory {
		all = all[len(all)-rtsandbox.MaxHistory:]
	}
	return all
}

// historyEntries is the wire form of loaded history messages; never nil.
func historyEntries(history []message) []rtsandbox.HistoryEntry {
	out := make([]rtsandbox.HistoryEntry, 0, len(history)+2)
	for _, m := range history {
		out = append(out, rtsandbox.HistoryEntry{Role: m.Role, Content: m.Content})
	}
	return out
}
