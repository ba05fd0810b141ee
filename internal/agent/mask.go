package agent

import (
	"net/url"
	"regexp"
	"strings"
)

// masked replaces every secret that maskSecrets finds.
const masked = "[MASKED]"

// secretPatterns find credentials in text that reaches an error message: provider
// messages may echo a key, and transport errors carry the request URL.
var secretPatterns = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Keys in query strings and header- or JSON-like "name: value" / "name=value" pairs.
	{regexp.MustCompile(`(?i)(\b(?:x-)?(?:api[-_]?key|access[-_]?token|auth[-_]?token|token|secret|password|authorization)["']?\s*[:=]\s*["']?)(?:(?:basic|bearer)\s+)?[^\s"'&,;}]+`), "${1}" + masked},
	// A bearer token anywhere else: "sent bearer abc".
	{regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+`), "Bearer " + masked},
	// OpenAI-style keys: sk-..., sk-proj-..., also when the provider starred part of it.
	{regexp.MustCompile(`\bsk-[A-Za-z0-9*][A-Za-z0-9_*-]{7,}`), "sk-" + masked},
}

// maskSecrets returns s with bearer tokens, sk- style keys and credentials in query
// strings or name/value pairs replaced by [MASKED]. Each literal (for example the
// configured API key) is masked wherever it appears, also URL-encoded, whatever its
// shape. It is deliberately small and internal so a shared masking package can
// replace it.
func maskSecrets(s string, literals ...string) string {
	for _, lit := range literals {
		if lit == "" {
			continue
		}
		s = strings.ReplaceAll(s, lit, masked)
		if esc := url.QueryEscape(lit); esc != lit {
			s = strings.ReplaceAll(s, esc, masked)
		}
	}
	for _, p := range secretPatterns {
		s = p.re.ReplaceAllString(s, p.repl)
	}
	return s
}
