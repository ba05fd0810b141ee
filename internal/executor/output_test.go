package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
)

// textLog is a LogReader over a fixed log text with the pods/log semantics the
// kubelet implements: tailLines first, then limitBytes from the start of what is
// left. It records the requests so tests can check that every read was bounded.
type textLog struct {
	text     string
	err      error
	requests []corev1.PodLogOptions
}

func (l *textLog) ReadLog(_ context.Context, _, _ string, opts corev1.PodLogOptions) ([]byte, error) {
	l.requests = append(l.requests, opts)
	if l.err != nil {
		return nil, l.err
	}
	b := []byte(l.text)
	if opts.TailLines != nil {
		lines := bytes.SplitAfter(b, []byte("\n"))
		if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		if n := int(*opts.TailLines); n < len(lines) {
			lines = lines[len(lines)-n:]
		}
		b = bytes.Join(lines, nil)
	}
	if opts.LimitBytes != nil && int64(len(b)) > *opts.LimitBytes {
		b = b[:*opts.LimitBytes]
	}
	return b, nil
}

func TestReadOutputAndCompose(t *testing.T) {
	manyLines := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.Repeat(string(rune('a'+i%26)), 9) + "\n")
		}
		return b.String()
	}
	big := manyLines(500) // 5000 bytes
	tests := []struct {
		name        string
		text        string
		total       int64
		cap         int32
		err         error
		wantOutput  string
		wantCut     bool
		wantErr     string
		wantHas     []string
		wantReads   int
		wantOmitted string
	}{
		{name: "fits: read whole with one request", text: "hello\n", total: 6, cap: 256, wantOutput: "hello\n", wantReads: 1},
		{name: "empty output", text: "", total: 0, cap: 256, wantOutput: "", wantReads: 1},
		{name: "exactly the cap", text: strings.Repeat("x", 256), total: 256, cap: 256, wantOutput: strings.Repeat("x", 256), wantReads: 1},
		{name: "larger: head and tail", text: big, total: 5000, cap: 1024, wantCut: true, wantReads: 3,
			wantHas: []string{big[:100], big[len(big)-100:], "…[toolgate: 4040 of 5000 bytes omitted]…"}},
		{name: "long last lines: fewer tail lines", text: big + strings.Repeat("L", 300) + "\n" + strings.Repeat("M", 300) + "\n", total: 5602, cap: 1024, wantCut: true, wantReads: 3,
			wantHas: []string{strings.Repeat("L", 150) + "\n" + strings.Repeat("M", 300) + "\n"}},
		{name: "unknown size, longer than the cap", text: big, total: -1, cap: 256, wantCut: true, wantReads: 1,
			wantHas: []string{big[:96], "output continues; cut at"}},
		{name: "unknown size, short", text: "tiny", total: -1, cap: 256, wantOutput: "tiny", wantReads: 1},
		{name: "one line too long to reach the end", text: strings.Repeat("y", 5000), total: 5000, cap: 256, wantCut: true, wantReads: 6,
			wantErr: "end of the container log was not read", wantHas: []string{"bytes omitted"}},
		{name: "read error", text: "x", total: 1, cap: 256, err: errors.New("pods \"p\" not found"), wantOutput: "", wantReads: 1,
			wantErr: "could not be read: pods \"p\" not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &textLog{text: tt.text, err: tt.err}
			lt := ReadOutput(context.Background(), logs, "ns", "p", tt.total, tt.cap)
			if len(logs.requests) != tt.wantReads {
				t.Errorf("made %d log requests, want %d", len(logs.requests), tt.wantReads)
			}
			for _, r := range logs.requests {
				if r.LimitBytes == nil || *r.LimitBytes > int64(tt.cap)*tailReadFactor+1 {
					t.Errorf("log request %+v is not bounded by the cap", r)
				}
				if r.Container != ToolContainerName {
					t.Errorf("read container %q, want %q", r.Container, ToolContainerName)
				}
			}
			if !strings.Contains(lt.Err, tt.wantErr) || (tt.wantErr == "" && lt.Err != "") {
				t.Errorf("Err = %q, want %q", lt.Err, tt.wantErr)
			}
			out, cut := ComposeOutput(lt, tt.cap)
			if cut != tt.wantCut {
				t.Errorf("cut = %v, want %v", cut, tt.wantCut)
			}
			if len(out) > int(tt.cap) {
				t.Errorf("output is %d bytes, over the cap %d", len(out), tt.cap)
			}
			if tt.wantHas == nil && out != tt.wantOutput {
				t.Errorf("output = %q, want %q", out, tt.wantOutput)
			}
			for _, s := range tt.wantHas {
				if !strings.Contains(out, s) {
					t.Errorf("output %q does not contain %q", out, s)
				}
			}
		})
	}
}

func TestComposeOutputRuneBoundaries(t *testing.T) {
	text := strings.Repeat("日本語", 200) // 1800 bytes of 3-byte runes
	head, tail := Budgets(256)
	lt := LogText{Head: []byte(text[:head+1]), Tail: []byte(text[len(text)-tail-1:]), Total: int64(len(text))}
	out, cut := ComposeOutput(lt, 256)
	if !cut || !utf8.ValidString(out) || len(out) > 256 {
		t.Errorf("ComposeOutput = %q (cut %v, %d bytes): want valid UTF-8 within 256 bytes", out, cut, len(out))
	}
}

// TestComposeOutputIsMasked: status.output is readable by every viewer, so it is
// masked like an observation and cannot carry terminal escapes.
func TestComposeOutputIsMasked(t *testing.T) {
	out, _ := ComposeOutput(LogText{Head: []byte("export API_TOKEN=abcdef123456\n\x1b[2Jdone\n"), Total: -1}, 4096)
	if strings.Contains(out, "abcdef123456") || strings.Contains(out, "\x1b") {
		t.Fatalf("output not masked: %q", out)
	}
	if !strings.Contains(out, `\x1b[2Jdone`) {
		t.Fatalf("escape not shown: %q", out)
	}
	huge := strings.Repeat("\x01", 1<<20)
	out, cut := ComposeOutput(LogText{Head: []byte(huge), Total: int64(len(huge))}, 1<<20)
	if StoredSize(out) > toolgatev1alpha1.MaxOutputTextBytes || !cut {
		t.Fatalf("escaped output of %d bytes (cut %v) does not fit the status", len(out), cut)
	}
}

// The Execution keeps what masking found, never the values: how many secrets and
// which rules found them, which the observation copies and trace shows as "2
// secrets redacted (aws-access-token, private-key)". An output with none keeps none.
func TestSetOutputSaysWhatWasMasked(t *testing.T) {
	key := "AKIA" + "QYLPMN5HFIQR7XYA"
	pem := "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yPz9bQ5yW1Gq3J4eQJbPfOeW7xR0xk8QyH3zPp0nH6P5s2V1kL8w\n-----END RSA PRIVATE KEY-----\n"
	var st toolgatev1alpha1.ExecutionStatus
	SetOutput(&st, LogText{Head: []byte("aws_access_key_id = " + key + "\n" + pem), Total: -1}, 1<<16)
	if strings.Contains(st.Output, key) || strings.Contains(st.Output, "MIIEowIBAAKCAQEA") {
		t.Fatalf("a secret kept: %q", st.Output)
	}
	m := st.MaskedSecrets
	if m == nil || m.Count < 2 || !slices.Contains(m.Kinds, "aws-access-token") || !slices.Contains(m.Kinds, "private-key") || !slices.IsSorted(m.Kinds) {
		t.Fatalf("maskedSecrets = %+v; want at least 2, with aws-access-token and private-key, sorted", m)
	}
	for _, k := range m.Kinds {
		if strings.Contains(k, key[4:]) {
			t.Fatalf("a kind carries the secret: %q", k)
		}
	}
	SetOutput(&st, LogText{Head: []byte("ok: 3 files, sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"), Total: -1}, 1<<16)
	if st.MaskedSecrets != nil {
		t.Fatalf("an output without secrets says %+v was masked (the status is written again: it must not keep the last output's)", st.MaskedSecrets)
	}
}

// StoredSize never counts less than the API server stores (encoding/json with its
// HTML escaping), and CutToStored keeps a text within its limit as stored, cutting
// only between runes and saying where it cut.
func TestCutToStoredFitsAsStored(t *testing.T) {
	texts := map[string]string{
		"plain":          strings.Repeat("hello world ", 1000),
		"escaped binary": mask.Secrets(string(bytes.Repeat([]byte{0, 1, 0xff, 0x1b}, 1000))),
		"html":           strings.Repeat("<a href=\"x\">&</a>\n", 500),
		"multibyte":      strings.Repeat("日本語\u2028é", 1000),
		"invalid utf-8":  string(bytes.Repeat([]byte{'a', 0xff}, 1000)),
	}
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			encoded, err := json.Marshal(text)
			if err != nil {
				t.Fatal(err)
			}
			if got := StoredSize(text); got < len(encoded)-2 {
				t.Fatalf("StoredSize %d, but JSON takes %d", got, len(encoded)-2)
			}
			if same, cut := CutToStored(text, StoredSize(text)); cut || same != text {
				t.Fatal("a text that fits was cut")
			}
			for _, limit := range []int{StoredSize(text) - 1, StoredSize(text) / 3, 200} {
				got, cut := CutToStored(text, limit)
				if !cut || StoredSize(got) > limit || !strings.Contains(got, "…[toolgate: cut here after masking") {
					t.Fatalf("limit %d: cut %t, %d bytes as stored", limit, cut, StoredSize(got))
				}
				if utf8.ValidString(text) && !utf8.ValidString(got) {
					t.Fatalf("limit %d: cut inside a rune", limit)
				}
				head, tail, _ := strings.Cut(got, cutAfterMaskingMarker)
				if !strings.HasPrefix(text, head) || !strings.HasSuffix(text, tail) || head == "" || tail == "" {
					t.Fatalf("limit %d: not the text's head and tail: %.80q … %.80q", limit, head, tail)
				}
			}
		})
	}
}
