package skills

import (
	"encoding/xml"
	"strings"
)

// promptIntro opens the system-prompt block.
const promptIntro = "The operator installed the skills listed below. Before answering or calling any other tool, " +
	"if a skill matches the task, read it with read_skill (its name; path defaults to SKILL.md) and follow it."

// PromptBlock is the skills block of the system prompt; "" when there are
// no skills.
func (ix *Index) PromptBlock() string {
	if len(ix.skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(promptIntro)
	b.WriteString("\n\n<available_skills>\n")
	for _, s := range ix.skills {
		b.WriteString("<skill><name>")
		_ = xml.EscapeText(&b, []byte(s.Name)) // a strings.Builder does not fail
		b.WriteString("</name><description>")
		_ = xml.EscapeText(&b, []byte(s.Description)) // a strings.Builder does not fail
		b.WriteString("</description></skill>\n")
	}
	b.WriteString("</available_skills>")
	return b.String()
}
