package executor

import (
	"fmt"
	"unicode/utf8"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/protocol"
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
	return protocol.OutputBudgets(maxOutputBytes)
}

// ComposeOutput returns the output for the Execution's status: the whole log when it
// fits in maxOutputBytes, else its head and tail with the cut marked in the text, and
// whether anything was cut. It never cuts inside a UTF-8 sequence. The status is
// read by every viewer of the namespace, so the text is masked like an observation
// (secrets replaced, terminal control characters escaped), and then cut again in the
// middle if masking made it take more than MaxOutputTextBytes as stored: escaping
// writes a byte as up to four.
//
// The full output keeps its secrets only where the namespace's users could read
// them anyway: the tool pod's log (pods/log in the namespace) and the artifact file
// in the task's workspace, both of which hold what the tool itself could read. The
// Execution's status.output is masked too, though it is "the full output" when it
// fits: an Execution is read by everyone who may get toolgate's objects in the
// namespace (viewers, dashboards, the console, trace), a wider audience than
// pods/log, and it outlives the pod. The model never reads any of them unmasked: a
// read_file of the artifact comes back as an observation, masked like this one.
func ComposeOutput(log LogText, maxOutputBytes int32) (output string, cut bool) {
	output, cut, _ = composeMasked(log, maxOutputBytes)
	return output, cut
}

// SetOutput writes into st the output an Execution keeps (ComposeOutput) and what
// masking found in it (status.maskedSecrets).
func SetOutput(st *toolgatev1alpha1.ExecutionStatus, log LogText, maxOutputBytes int32) {
	var found []string
	st.Output, st.Truncated, found = composeMasked(log, maxOutputBytes)
	st.MaskedSecrets = nil
	if len(found) > 0 {
		if len(found) > maxMaskedKinds {
			found = found[:maxMaskedKinds]
		}
		st.MaskedSecrets = &toolgatev1alpha1.MaskedSecrets{Count: int32(max(mask.Count(st.Output), 1)), Kinds: found}
	}
}

// maxMaskedKinds is what status.maskedSecrets.kinds holds at most.
const maxMaskedKinds = 32

func composeMasked(log LogText, maxOutputBytes int32) (output string, cut bool, found []string) {
	output, cut = composeOutput(log, maxOutputBytes)
	output, found = mask.Find(output)
	output, cutAfterMasking := CutToStored(output, toolgatev1alpha1.MaxOutputTextBytes)
	return output, cut || cutAfterMasking, found
}

// cutAfterMaskingMarker stands where CutToStored cut a text.
const cutAfterMaskingMarker = "\n…[toolgate: cut here after masking, to fit the status]…\n"

// StoredSize is how many bytes s takes as the API server stores it: encoded as a
// JSON string (without its quotes), which writes a quote, a backslash, a newline or
// a tab as two bytes and '<', '>', '&', another control character, U+2028, U+2029
// or a byte that is not UTF-8 as six (\uNNNN; the API server's encoder escapes
// HTML). It is an upper bound where encoders differ.
func StoredSize(s string) int {
	n := 0
	for _, r := range s {
		n += storedRuneSize(r)
	}
	return n
}

func storedRuneSize(r rune) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\t' || r == '\r':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
		return 6
	}
	return utf8.RuneLen(r)
}

// CutToStored returns s unchanged when it takes at most limit bytes as stored
// (StoredSize), else its head and tail, each about half of limit, with a marker
// between them that says it was cut, and true. It cuts only between runes, and the
// result never takes more than limit bytes as stored.
func CutToStored(s string, limit int) (string, bool) {
	if StoredSize(s) <= limit {
		return s, false
	}
	room := max(limit-StoredSize(cutAfterMaskingMarker), 0)
	headRoom := room / 2
	end, used := 0, 0
	for i, r := range s {
		if used+storedRuneSize(r) > headRoom {
			end = i
			break
		}
		used += storedRuneSize(r)
	}
	tailRoom := room - used
	start, used := len(s), 0
	for start > end {
		r, size := utf8.DecodeLastRuneInString(s[:start])
		if used+storedRuneSize(r) > tailRoom {
			break
		}
		used += storedRuneSize(r)
		start -= size
	}
	return s[:end] + cutAfterMaskingMarker + s[start:], true
}

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
