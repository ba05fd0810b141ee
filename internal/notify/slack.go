package notify

import (
	"encoding/json"
	"fmt"
	"strings"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Slack's block kit, as much of it as a message uses.
type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// Verbatim keeps Slack from turning URLs and channel names in the text into
	// links: the text is the agent's, not ours.
	Verbatim bool `json:"verbatim,omitempty"`
}

type slackBlock struct {
	Type   string      `json:"type"`
	Text   *slackText  `json:"text,omitempty"`
	Fields []slackText `json:"fields,omitempty"`
}

type slackPayload struct {
	// Text is the notification's fallback, shown where blocks are not.
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

// slackTitle is the header of each event.
var slackTitle = map[v1.NotificationEvent]string{
	v1.EventRequested:  "Approval requested",
	v1.EventDecided:    "Approval decided",
	v1.EventExpired:    "Approval expired",
	v1.EventSuperseded: "Approval superseded",
}

// Slack is the message as a Slack incoming webhook's JSON body, in blocks. Every
// text from the call is escaped (slackEscape) and the input is in a code block.
func Slack(m Message) ([]byte, error) {
	title := fmt.Sprintf("%s: %s in %s/%s", slackTitle[m.Event], m.Tool, m.Namespace, m.Task)
	section := func(s string) slackBlock {
		return slackBlock{Type: "section", Text: &slackText{Type: "mrkdwn", Text: s, Verbatim: true}}
	}
	field := func(name, value string) slackText {
		return slackText{Type: "mrkdwn", Text: "*" + name + "*\n" + slackEscape(value), Verbatim: true}
	}
	blocks := []slackBlock{
		{Type: "header", Text: &slackText{Type: "plain_text", Text: clip(title, 150)}},
		section("*Task goal*\n" + slackEscape(m.Goal)),
		section("*Input*\n" + slackCode(m.Input)),
		{Type: "section", Fields: []slackText{
			field("Tool", m.Tool), field("Risk / category", m.Risk+" / "+m.Category),
			field("Asked by rule", m.Rule), field("Requested by", m.RequestedBy),
			field("Walls", m.Walls), field("Network and DNS", m.Network),
			field("Who may approve", m.Approvers), field("Expires", m.ExpiresAt),
		}},
	}
	if m.Reason != "" {
		blocks = append(blocks, section("*Why the rule asks*\n"+slackEscape(m.Reason)))
	}
	if m.ProposerReason != "" {
		blocks = append(blocks, section("*The agent's reason (untrusted)*\n"+slackEscape(m.ProposerReason)))
	}
	if len(m.Parts) > 0 {
		var b strings.Builder
		for _, p := range m.Parts {
			fmt.Fprintf(&b, "%s  [%s]\n", p.Command, p.Category)
		}
		blocks = append(blocks, section("*Parts*\n"+slackCode(b.String())))
	}
	if m.Outcome != nil {
		s := fmt.Sprintf("*%s* by %s", slackEscape(m.Outcome.Decision), slackEscape(strings.Join(m.Outcome.DecidedBy, ", ")))
		if m.Outcome.Comment != "" {
			s += "\n" + slackEscape(m.Outcome.Comment)
		}
		blocks = append(blocks, section(s))
	} else if m.Event != v1.EventRequested && m.StateMessage != "" {
		blocks = append(blocks, section(slackEscape(m.StateMessage)))
	}
	var how []string
	if m.ApproveCommand != "" {
		how = append(how, "Decide with your own credentials:\n"+slackCode(m.ApproveCommand))
	}
	if m.ConsoleURL != "" {
		how = append(how, "Console: "+slackEscape(m.ConsoleURL))
	}
	how = append(how, slackEscape(fmt.Sprintf("Approval %s/%s", m.Namespace, m.Approval)))
	blocks = append(blocks, section(strings.Join(how, "\n")))
	for i := range blocks {
		if blocks[i].Text != nil {
			blocks[i].Text.Text = clip(blocks[i].Text.Text, 3000)
		}
		for j := range blocks[i].Fields {
			blocks[i].Fields[j].Text = clip(blocks[i].Fields[j].Text, 2000)
		}
	}
	return json.Marshal(slackPayload{Text: slackEscape(title), Blocks: blocks})
}

// slackEscape escapes what Slack's mrkdwn reads as control sequences, &, < and >
// (a <URL|text> link, a <@U123> mention, <!channel>), so that text from the call
// cannot link or notify anyone; with verbatim set, bare URLs stay text too.
// Emphasis (*, _) is left: it changes how text looks, not where it leads.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func slackEscape(s string) string { return slackEscaper.Replace(s) }

// slackCode puts s in a code block; inside one, Slack still reads &, < and >, and a
// backquote could close the block.
func slackCode(s string) string {
	if s == "" {
		return "(empty)"
	}
	return "```" + strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "\u02cb").Replace(s) + "```"
}

// clip cuts s to n bytes on a rune boundary, saying so: Slack refuses longer texts.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "… (cut; the Approval holds all of it)"
	cut := n - len(more)
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
