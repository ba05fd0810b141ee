// Package mask removes secrets from text before it reaches a person or a model:
// audit lines, observation summaries, approval requests and error messages.
//
// Masking is best effort by pattern; it is a second line of defence behind keeping
// secrets out of tool calls in the first place. Patterns err on the side of masking.
package mask

import (
	"net/url"
	"regexp"
	"strings"
)

// Masked replaces every secret found.
const Masked = "[MASKED]"

// secretName matches names whose values are secrets.
const secretName = `(?:api[-_]?key|apikey|access[-_]?key|secret[-_]?key|access[-_]?token|auth[-_]?token|refresh[-_]?token|id[-_]?token|token|secret|passwd|password|pwd|authorization|credentials?|sig|signature|client[-_]?secret)`

var patterns = []struct {
	re   *regexp.Regexp
	repl string
}{
	// PEM private keys, whole block.
	{regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`), Masked},
	// Credentials in URLs: scheme://user:password@host.
	{regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@`), "${1}" + Masked + "@"},
	// Secret-looking names followed by a value, as in query strings, headers, env
	// assignments, flags and JSON: token=..., "password": "...", --api-key ..., Authorization: Bearer ...
	{regexp.MustCompile(`(?i)(\b(?:x-)?(?:[a-z0-9]+[-_])*` + secretName + `["']?\s*[:=]\s*["']?)(?:(?:basic|bearer|token)\s+)?[^\s"'&,;}]{3,}`), "${1}" + Masked},
	// The same names as command-line flags: --api-key VALUE, --password VALUE.
	{regexp.MustCompile(`(?i)(--?(?:[a-z0-9]+-)*` + secretName + `\s+)[^\s-][^\s]{2,}`), "${1}" + Masked},
	// A bearer token anywhere else.
	{regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}`), "Bearer " + Masked},
	// Well-known key shapes.
	{regexp.MustCompile(`\bsk-[A-Za-z0-9*][A-Za-z0-9_*-]{7,}`), "sk-" + Masked},
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`), Masked},
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}\b`), Masked},
	{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}\b`), Masked},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}\b`), Masked},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b`), Masked},
}

// Secrets returns s with secrets replaced by [MASKED]: bearer tokens, API keys, passwords,
// secret-looking query and header values, credentials in URLs, private keys, JWTs and
// well-known token shapes. Each literal (for example a configured API key) is masked
// wherever it appears, also URL-encoded, whatever its shape.
func Secrets(s string, literals ...string) string {
	for _, lit := range literals {
		if len(lit) < 4 {
			// Masking a very short literal would mangle ordinary text.
			continue
		}
		s = strings.ReplaceAll(s, lit, Masked)
		if esc := url.QueryEscape(lit); esc != lit {
			s = strings.ReplaceAll(s, esc, Masked)
		}
	}
	for _, p := range patterns {
		s = p.re.ReplaceAllString(s, p.repl)
	}
	return s
}
