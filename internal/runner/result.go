package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// trimmedSuffix ends a message that was cut to fit the termination message.
const trimmedSuffix = " …[message trimmed]"

// EncodeResult returns r as compact JSON of at most MaxTerminationMessageBytes. When r
// does not fit, its Message is cut (at a UTF-8 boundary, with a notice) to the longest
// prefix that fits; if even an empty message does not fit, the optional texts are
// dropped. The result is always valid JSON.
func EncodeResult(r Result) []byte {
	if b := marshalResult(r); len(b) <= MaxTerminationMessageBytes {
		return b
	}
	msg := r.Message
	fits := func(n int) bool {
		r.Message = msg[:n] + trimmedSuffix
		return len(marshalResult(r)) <= MaxTerminationMessageBytes
	}
	if fits(0) {
		// Binary search for the longest prefix that fits: lo fits, hi does not.
		lo, hi := 0, len(msg)
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		for lo > 0 && !utf8.RuneStart(msg[lo]) {
			lo--
		}
		r.Message = msg[:lo] + trimmedSuffix
		return marshalResult(r)
	}
	r.Message = trimmedSuffix
	r.ArtifactPath, r.ArtifactSkipped = "", ""
	if b := marshalResult(r); len(b) <= MaxTerminationMessageBytes {
		return b
	}
	// Unreachable with the fields Result has today; kept so the promise holds.
	return marshalResult(Result{ExitCode: r.ExitCode, ErrorKind: KindException, Message: "result too large for the termination message"})
}

func marshalResult(r Result) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// "<" and ">" are common in tool messages; escaping them would cost 6 bytes each.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		// Result has only strings, numbers and bools: Encode cannot fail.
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// DecodeResult parses a termination message written by the runner.
func DecodeResult(msg []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(msg, &r); err != nil {
		return Result{}, fmt.Errorf("runner result is not valid JSON: %w", err)
	}
	return r, nil
}
