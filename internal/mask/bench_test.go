package mask

import (
	"strings"
	"testing"
)

// benchOutputs are 64 KiB tool outputs, the most an observation carries:
//   - mixed: the ordinary corpus (git, checksums, lockfiles, YAML, stack traces,
//     tables) over and over, with three secrets in it;
//   - keyword on every line: log lines that each name a key and an API, so
//     gitleaks' prefilter lets its broad rules run on every line;
//   - json lines: structured logs whose messages carry escaped quotes, so the
//     text is also read with its escapes undone (a second pass).
func benchOutputs() map[string]string {
	const size = 64 << 10
	fill := func(pieces []string, secrets string) string {
		var b strings.Builder
		b.WriteString(secrets)
		for i := 0; b.Len() < size; i++ {
			b.WriteString(pieces[i%len(pieces)])
		}
		return b.String()[:size]
	}
	secrets := "export AWS_ACCESS_KEY_ID=" + fakeAWSKey + "\nGITHUB_TOKEN=" + fakeGitHubPAT + "\npassword=hunter22\n"
	return map[string]string{
		"mixed":                 fill(ordinaryOutputs(), secrets),
		"keyword_on_every_line": fill([]string{"2026-12-07T15:02:11Z INFO GET /api/v1/keys/7f3c9a2e-1b4d-4e8a-9c2f-3d5e6f7a8b9c status=200 key_id=3f2a9c1e took=12ms\n"}, secrets),
		"json_lines":            fill([]string{`{"level":"info","ts":"2026-12-07T15:02:11Z","msg":"handled \"GET /items?page=2\" for \"dana\"","status":200,"took":"12ms"}` + "\n"}, secrets),
	}
}

// BenchmarkMask64KiB measures masking a 64 KiB output, as each observation does:
// Secrets (gitleaks' rules and toolgate's own) against the hand-written masks
// toolgate had before (legacy), in the same run.
func BenchmarkMask64KiB(b *testing.B) {
	outputs := benchOutputs()
	gitleaks() // built once per process, not per observation
	for _, input := range []string{"mixed", "keyword_on_every_line", "json_lines"} {
		s := outputs[input]
		b.Run("gitleaks/"+input, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			b.ReportAllocs()
			for b.Loop() {
				Secrets(s)
			}
		})
		b.Run("legacy/"+input, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			b.ReportAllocs()
			for b.Loop() {
				legacy(s, nil, nil)
			}
		})
	}
}

// BenchmarkDetectorBuild is what the first masking in a process pays once.
func BenchmarkDetectorBuild(b *testing.B) {
	for b.Loop() {
		gitleaksBuild()
	}
}
