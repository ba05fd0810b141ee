package mask

// The hand-written masks toolgate had before issue 41, kept as the baseline
// BenchmarkMask64KiB measures the detector against. Nothing but the benchmark uses
// them.

import (
	"net/url"
	"regexp"
	"strings"
)

// legacySecretName matches names whose values are secrets.
const legacySecretName = `(?:api[-_]?key|apikey|access[-_]?key|secret[-_]?key|access[-_]?token|auth[-_]?token|refresh[-_]?token|id[-_]?token|token|secret|passwd|password|pwd|authorization|credentials?|sig|signature|client[-_]?secret)`

var legacyPatterns = []struct {
	re   *regexp.Regexp
	repl string
	// valueAfter is the group that ends right before the secret value, for the
	// legacyPatterns whose value may be a command substitution instead.
	valueAfter int
}{
	// PEM private keys, whole block.
	{regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`), Masked, 0},
	// Credentials in URLs: scheme://user:password@host.
	{regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@`), "${1}" + Masked + "@", 0},
	// Secret-looking names followed by a value, as in query strings, headers, env
	// assignments, flags and JSON: token=..., "password": "...", --api-key ..., Authorization: Bearer ...
	{regexp.MustCompile(`(?i)(\b(?:x-)?(?:[a-z0-9]+[-_])*` + legacySecretName + `["']?\s*[:=]\s*["']?)(?:(?:basic|bearer|token)\s+)?[^\s"'&,;}]{3,}`), "${1}" + Masked, 1},
	// The same names as command-line flags: --api-key VALUE, --password VALUE.
	{regexp.MustCompile(`(?i)(--?(?:[a-z0-9]+-)*` + legacySecretName + `[ \t]+)[^\s-][^\s]{2,}`), "${1}" + Masked, 1},
	// A bearer token anywhere else.
	{regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}`), "Bearer " + Masked, 0},
	// Well-known key shapes.
	{regexp.MustCompile(`\bsk-[A-Za-z0-9*][A-Za-z0-9_*-]{7,}`), "sk-" + Masked, 0},
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`), Masked, 0},
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}\b`), Masked, 0},
	{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}\b`), Masked, 0},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}\b`), Masked, 0},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b`), Masked, 0},
}

// legacy is what Secrets was (mask nil) and Command; mask, when not nil, says whether the value after a secret
// name may be masked.
func legacy(s string, mask func(name string) bool, literals []string) string {
	s = Escape(s)
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
	for _, p := range legacyPatterns {
		if p.valueAfter == 0 {
			s = p.re.ReplaceAllString(s, p.repl)
			continue
		}
		s = legacyReplaceValues(p.re, p.valueAfter, s, mask)
	}
	return s
}

// legacySubstitutions start the shell constructs that run something where a value stands.
var legacySubstitutions = []string{"$(", "`", "${", "<(", ">("}

// legacyReplaceValues masks the value after group g of each match of re, up to the first
// substitution in it: password=abc$(cat key) is password=[MASKED]$(cat key), and
// password=$(cat key) is left as it is, for an approver must see what runs.
func legacyReplaceValues(re *regexp.Regexp, g int, s string, mask func(name string) bool) string {
	idx := re.FindAllStringSubmatchIndex(s, -1)
	if idx == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range idx {
		end, valueStart := m[1], m[2*g+1]
		value := s[valueStart:end]
		if mask != nil && !mask(legacyLeadingName(s[m[0]:valueStart])) {
			continue
		}
		cut := len(value)
		for _, sub := range legacySubstitutions {
			if i := strings.Index(value, sub); i >= 0 && i < cut {
				cut = i
			}
		}
		b.WriteString(s[last:valueStart])
		if cut > 0 {
			b.WriteString(Masked)
		}
		b.WriteString(value[cut:])
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

// legacyLeadingName is the name a secret pattern matched at: the identifier its match
// starts with, after any leading dashes of a flag.
func legacyLeadingName(match string) string {
	match = strings.TrimLeft(match, "-")
	identifier := func(r rune) bool {
		return r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	end := strings.IndexFunc(match, func(r rune) bool { return !identifier(r) })
	if end < 0 {
		return match
	}
	return match[:end]
}
