package mask

import (
	"net/url"
	"regexp"
	"strings"
)

// Toolgate's own patterns, kept where gitleaks' default rules have none, or where
// its rule is narrower than what toolgate masked before and a shape it misses
// reaches tool output in practice:
//   - a secret-looking name followed by any value: gitleaks' generic-api-key needs
//     ten or more characters of high entropy (password=hunter22, token=abc123 pass
//     it), and the name=value shapes of flags (--api-key VALUE) are not in it;
//   - a bearer token outside a curl command (gitleaks' curl-auth-header is only
//     for curl);
//   - credentials in a URL (scheme://user:password@host): gitleaks has no generic
//     rule (only sidekiq-sensitive-url);
//   - sk-… keys of any provider and length, the ones a provider starred too
//     (openai-api-key is the exact OpenAI shape only);
//   - gh…_ tokens shorter than GitHub's current 36 characters (github-pat and its
//     siblings are exact);
//   - a PEM private key block whatever its length (private-key needs 64 characters
//     of body);
//   - the values under data: and stringData: of a Kubernetes Secret, all of them
//     (kubernetes-secret-yaml reports the first one; see secretData).
//
// Their rule names are toolgate's own, but for the two that widen a gitleaks rule of
// the same kind (aws-access-token, jwt) and take its name.

// secretName matches names whose values are secrets.
const secretName = `(?:api[-_]?key|apikey|access[-_]?key|secret[-_]?key|access[-_]?token|auth[-_]?token|refresh[-_]?token|id[-_]?token|token|secret|passwd|password|pwd|authorization|credentials?|sig|signature|client[-_]?secret)`

type pattern struct {
	rule string
	re   *regexp.Regexp
	// group is the submatch to mask; 0 is the whole match.
	group int
	// valueAfter is the group that ends right before the secret value, for the
	// patterns whose value may be a command substitution instead; the value runs
	// to the match's end.
	valueAfter int
	// hints are lower-case words one of which every match holds: a line
	// without any is not scanned.
	hints []string
	// multiLine patterns run over the whole text; the others a line at a time
	// (with the next line when the line ends in an operator), where Go's regexp
	// can use its backtracker.
	multiLine bool
}

var patterns = []*pattern{
	{rule: "private-key-block", re: regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`), hints: []string{"-----begin"}, multiLine: true},
	{rule: "url-credentials", re: regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:([^/\s@]+)@`), group: 1, hints: []string{"://"}},
	// Secret-looking names followed by a value, as in query strings, headers, env
	// assignments, flags and JSON: token=..., "password": "...", Authorization: Bearer ...
	{rule: "secret-assignment", re: regexp.MustCompile(`(?i)(\b(?:x-)?(?:[a-z0-9]+[-_])*` + secretName + `["']?\s*[:=]\s*["']?)(?:(?:basic|bearer|token)\s+)?[^\s"'&,;}]{3,}`), valueAfter: 1, hints: nameHints},
	// The same names as command-line flags: --api-key VALUE, --password VALUE.
	// A flag starts a word: registry-credentials in a table is no flag.
	{rule: "secret-flag", re: regexp.MustCompile(`(?i)(?:^|[ \t])(--?(?:[a-z0-9]+-)*` + secretName + `[ \t]+)[^\s-][^\s]{2,}`), valueAfter: 1, hints: nameHints},
	{rule: "bearer-token", re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})`), group: 1, hints: []string{"bearer"}},
	{rule: "sk-key", re: regexp.MustCompile(`\bsk-[A-Za-z0-9*][A-Za-z0-9_*-]{7,}`), hints: []string{"sk-"}},
	{rule: "github-token", re: regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}\b`), hints: []string{"gh", "github_pat_"}},
	// Also gitleaks': its aws-access-token, slack-* and jwt rules are narrower
	// (no digits 0, 1, 8, 9 in AWS keys; fixed lengths).
	{rule: "aws-access-token", re: regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`), hints: []string{"akia", "asia"}},
	{rule: "slack-token", re: regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}\b`), hints: []string{"xox"}},
	{rule: "jwt", re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b`), hints: []string{"eyj"}},
}

// nameHints are words every secretName holds.
var nameHints = []string{"key", "token", "secret", "passw", "pwd", "auth", "credential", "sig"}

// ownSecrets returns what toolgate's own patterns find in s.
func ownSecrets(s string) []span {
	lower := strings.ToLower(s)
	hinted := func(text string, hints []string) bool {
		for _, h := range hints {
			if strings.Contains(text, h) {
				return true
			}
		}
		return false
	}
	var spans []span
	for _, p := range patterns {
		if !hinted(lower, p.hints) {
			continue
		}
		if p.multiLine {
			spans = append(spans, p.find(s, 0, len(s))...)
			continue
		}
		forLines(s, func(start, end int) {
			if hinted(lower[start:end], p.hints) {
				spans = append(spans, p.find(s, start, end)...)
			}
		})
	}
	return spans
}

// find returns the spans p matches in s[start:end].
func (p *pattern) find(s string, start, end int) []span {
	var spans []span
	text := s[start:end]
	for _, m := range p.re.FindAllStringSubmatchIndex(text, -1) {
		switch {
		case p.valueAfter > 0:
			valueStart := m[2*p.valueAfter+1]
			name := leadingName(text[m[2*p.valueAfter]:valueStart])
			if notSecret(name, text[valueStart:m[1]]) {
				continue
			}
			spans = append(spans, span{start: start + valueStart, end: start + m[1], rule: p.rule, name: name})
		case m[2*p.group] >= 0:
			spans = append(spans, span{start: start + m[2*p.group], end: start + m[2*p.group+1], rule: p.rule})
		}
	}
	return spans
}

// notSecret tells the values after a secret-looking name that are not secrets:
// the shell's working directories (PWD, OLDPWD: pwd is also short for password), a
// call (token = self.client.fetch_token(url)), which is code, and a flag's word
// (notification-credentials=true in a label selector).
func notSecret(name, value string) bool {
	return strings.EqualFold(name, "pwd") || strings.EqualFold(name, "oldpwd") || call.MatchString(value) || flagWords[strings.ToLower(value)]
}

// flagWords are the values that switch something rather than hold a secret.
var flagWords = map[string]bool{"true": true, "false": true, "yes": true, "no": true, "on": true, "off": true, "null": true, "nil": true, "none": true, "enabled": true, "disabled": true, "required": true, "optional": true}

// call is a value that is a function or method call.
var call = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*\(`)

// minLiteral is the shortest literal masked: masking a very short one would mangle
// ordinary text.
const minLiteral = 4

// literalSpans returns each occurrence of each literal in s, also URL-encoded.
func literalSpans(s string, literals []string) []span {
	var spans []span
	for _, lit := range literals {
		if len(lit) < minLiteral {
			continue
		}
		spans = append(spans, occurrences(s, lit, "literal")...)
		if esc := url.QueryEscape(lit); esc != lit {
			spans = append(spans, occurrences(s, esc, "literal")...)
		}
	}
	return spans
}

// substitutions start the shell constructs that run something where a value stands.
var substitutions = []string{"$(", "`", "${", "<(", ">("}

// cutAtSubstitution ends a value's span before the first substitution in it:
// password=abc$(cat key) is password=[MASKED]$(cat key), and password=$(cat key) is
// left as it is, for an approver must see what runs. It returns false when
// nothing is left to mask.
func cutAtSubstitution(s string, sp *span) bool {
	value := s[sp.start:sp.end]
	for _, sub := range substitutions {
		if i := strings.Index(value, sub); i >= 0 && sp.start+i < sp.end {
			sp.end = sp.start + i
			value = s[sp.start:sp.end]
		}
	}
	return sp.end > sp.start
}

// leadingName is the name a secret pattern matched at: the identifier its match
// starts with, after any leading dashes of a flag.
func leadingName(match string) string {
	match = strings.TrimLeft(match, " \t-")
	identifier := func(r rune) bool {
		return r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	end := strings.IndexFunc(match, func(r rune) bool { return !identifier(r) })
	if end < 0 {
		return match
	}
	return match[:end]
}
