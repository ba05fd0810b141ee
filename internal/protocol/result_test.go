package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeResultAlwaysFits(t *testing.T) {
	base := Result{ExitCode: 1, ErrorKind: KindException, ArtifactPath: ".toolgate/executions/e/output.log", OutputSHA256: strings.Repeat("a", 64)}
	for _, tc := range []struct {
		name    string
		message string
		trimmed bool
	}{
		{name: "empty", message: ""},
		{name: "short", message: "path \"x\" does not exist"},
		{name: "just fits", message: strings.Repeat("m", MaxTerminationMessageBytes-len(marshalResult(base))-len(`,"message":""`))},
		{name: "long ascii", message: strings.Repeat("x", 100000), trimmed: true},
		{name: "multi-byte runes", message: strings.Repeat("日本語", 5000), trimmed: true},
		{name: "characters JSON escapes", message: strings.Repeat("\x01\"\\\n", 5000), trimmed: true},
		{name: "invalid UTF-8", message: strings.Repeat("\xff\xfe", 5000), trimmed: true},
		{name: "angle brackets", message: strings.Repeat("<>", 3000), trimmed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			r.Message = tc.message
			b := EncodeResult(r)
			if len(b) > MaxTerminationMessageBytes {
				t.Fatalf("%d bytes", len(b))
			}
			var got Result
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("not valid JSON: %v", err)
			}
			if got.ExitCode != 1 || got.ErrorKind != KindException || got.ArtifactPath != base.ArtifactPath {
				t.Errorf("fields lost: %+v", got)
			}
			if !tc.trimmed {
				if got.Message != tc.message {
					t.Errorf("message changed: %q", got.Message)
				}
				return
			}
			kept, ok := strings.CutSuffix(got.Message, trimmedSuffix)
			if !ok {
				t.Fatalf("trimmed message lacks the notice: %q", got.Message)
			}
			if utf8.ValidString(tc.message) && !strings.HasPrefix(tc.message, kept) {
				t.Errorf("kept text is not a prefix of the message")
			}
			// The cut keeps as much as fits: one more byte of text would not.
			if len(b) < MaxTerminationMessageBytes-16 && utf8.ValidString(tc.message) && !strings.ContainsAny(tc.message, "\x01\"\\\n") {
				t.Errorf("only %d bytes used; the message was cut too short", len(b))
			}
		})
	}
}

func TestDecodeResultRefusesGarbage(t *testing.T) {
	if _, err := DecodeResult([]byte("{")); err == nil {
		t.Fatal("no error for invalid JSON")
	}
	r, err := DecodeResult(EncodeResult(Result{ExitCode: 124, ErrorKind: KindTimeout, Truncated: true}))
	if err != nil || r.ExitCode != 124 || r.ErrorKind != KindTimeout || !r.Truncated {
		t.Fatalf("round trip: %+v, %v", r, err)
	}
}

func TestTruncated(t *testing.T) {
	for _, tc := range []struct {
		total int64
		max   int32
		want  bool
	}{
		{0, 256, false},
		{256, 256, false},
		{257, 256, true},
		{50 << 20, 1 << 20, true},
	} {
		if got := Truncated(tc.total, tc.max); got != tc.want {
			t.Errorf("Truncated(%d, %d) = %v, want %v", tc.total, tc.max, got, tc.want)
		}
	}
}
