package worker

import (
	"errors"
	"path/filepath"

	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// maxHistory is how many messages (10 exchanges) history.json keeps.
const maxHistory = 20

var errInvalidHistory = errors.New("invalid history")

// historyFile is <workspace>/history.json: the channel's recent exchanges.
func historyFile(workspace string) string { return filepath.Join(workspace, "history.json") }

// loadHistory reads the saved exchanges, each truncated to the history
// budget. With reset the file is not read at all. A file that breaks the
// shape fails the worker instead of being replaced, so a bad write is
// noticed rather than silently discarding the channel's history.
func loadHistory(workspace string, reset bool) ([]message, error) {
	if reset {
		return nil, nil
	}
	data, exists, err := readState(historyFile(workspace))
	if err != nil || !exists {
		return nil, err
	}
	items, ok := array(data)
	if !ok || len(items) > maxHistory {
		return nil, errInvalidHistory
	}
	out := make([]message, 0, len(items))
	for _, item := range items {
		obj, ok := object(item)
		if !ok {
			return nil, errInvalidHistory
		}
		role, _ := str(obj["role"])
		content, ok := str(obj["content"])
		if !ok || (role != "user" && role != "assistant") {
			return nil, errInvalidHistory
		}
		out = append(out, message{Role: role, Content: promptText(content, budgetHistory)})
	}
	return out, nil
}

// saveHistory appends this turn's exchange to the full loaded history
// (including entries the context budget dropped from this turn's calls)
// and keeps the last maxHistory messages.
func saveHistory(workspace string, history []message, userContent, answer string) error {
	all := make([]message, 0, len(history)+2)
	all = append(all, history...)
	all = append(all,
		message{Role: "user", Content: promptText(userContent, budgetHistory)},
		message{Role: "assistant", Content: promptText(answer, budgetHistory)},
	)
	if len(all) > maxHistory {
		all = all[len(all)-maxHistory:]
	}
	data, err := jsonjs.Marshal(all)
	if err != nil {
		return err
	}
	return writeAtomic(historyFile(workspace), data)
}
