package executor

import (
	"fmt"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/runner"
)

// LogText is what was read of the tool container's log, which is the tool's whole
// combined output as the runner wrote it.
type LogText struct {
	// Head is the start of the log.
	Head []byte
	// Tail is the end of the log, read only when the log is longer than
	// maxOutputBytes; it does not overlap Head.
	Tail []byte
	// Total is the log's full size as the runner reported it (stdout plus stderr
	// bytes), or -1 when the runner reported nothing.
	Total int64
	// Err says why the log (or its tail) could not be read; empty when it was.
	Err string
}

// Budgets splits maxOutputBytes into the bytes kept from the head and from the tail of
// an output that does not fit, leaving room for the marker between them: the
// runner's split (a session call's runner sends exactly these).
func Budgets(maxOutputBytes int32) (head, tail int) {
	return runner.OutputBudgets(maxOutputBytes)
}

// ComposeOutput returns the output for the Execution's status: the whole log when it
// fits in maxOutputBytes, else its head and tail with the cut marked in the text, and
// whether anything was cut. It never cuts inside a UTF-8 sequence. The status is
// read by every viewer of the namespace, so the text is masked like an observation
// (secrets replaced, terminal control characters escaped), and cut again if escaping
// made it longer than the status may hold.
func ComposeOutput(log LogText, maxOutputBytes int32) (output string, cut bool) {
	output, cut = composeOutput(log, maxOutputBytes)
	output = mask.Secrets(output)
	if len(output) > maxStatusOutput {
		end := maxStatusOutput
		for end > 0 && !utf8.RuneStart(output[end]) {
			end--
		}
		output, cut = output[:end]+"\n…[toolgate: cut after masking]…\n", true
	}
	return output, cut
}

// maxStatusOutput keeps the masked output under the CRD's limit of status.output.
const maxStatusOutput = 2_000_000

func composeOutput(log LogText, maxOutputBytes int32) (output string, cut bool) {
	limit := int(maxOutputBytes)
	whole := len(log.Head) + len(log.Tail)
	if len(log.Tail) == 0 && len(log.Head) <= limit && (log.Total < 0 || log.Total <= int64(limit)) {
		return string(log.Head), false
	}
	headBudget, tailBudget := Budgets(maxOutputBytes)
	head := headPrefix(log.Head, headBudget)
	tail := tailSuffix(log.Tail, tailBudget)
	total := log.Total
	if total < int64(whole) {
		total = int64(whole)
	}
	var marker string
	if len(tail) == 0 {
		if log.Total < 0 {
			marker = "\n…[toolgate: output continues; cut at " + fmt.Sprint(len(head)) + " bytes]…\n"
		} else {
			marker = fmt.Sprintf("\n…[toolgate: %d of %d bytes omitted]…\n", total-int64(len(head)), total)
		}
	} else {
		marker = fmt.Sprintf("\n…[toolgate: %d of %d bytes omitted]…\n", total-int64(len(head))-int64(len(tail)), total)
	}
	return string(head) + marker + string(tail), true
}

// headPrefix is at most n bytes from the start of b, ending on a rune boundary.
func headPrefix(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	end := n
	for end > 0 && !utf8.RuneStart(b[end]) {
		end--
	}
	return b[:end]
}

// tailSuffix is at most n bytes from the end of b, starting on a rune boundary.
func tailSuffix(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	start := len(b) - n
	for start < len(b) && !utf8.RuneStart(b[start]) {
		start++
	}
	return b[start:]
}
