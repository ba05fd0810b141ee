// Package mask prepares untrusted text before it reaches a person or a model (audit
// lines, events, observation summaries, approval requests, the CLI, error messages):
// it escapes the characters that change what a terminal shows (control characters,
// bidirectional overrides, invisible formatting) and replaces secrets.
//
// Masking is best effort by pattern; it is a second line of defence behind keeping
// secrets out of tool calls in the first place. Patterns err on the side of masking,
// but never hide what runs: a command or substitution in a secret's place
// (password=$(cat key)) stays visible, so an approver sees every part of a call.
package mask

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Masked replaces every secret found.
const Masked = "[MASKED]"

// secretName matches names whose values are secrets.
const secretName = `(?:api[-_]?key|apikey|access[-_]?key|secret[-_]?key|access[-_]?token|auth[-_]?token|refresh[-_]?token|id[-_]?token|token|secret|passwd|password|pwd|authorization|credentials?|sig|signature|client[-_]?secret)`

var patterns = []struct {
	re   *regexp.Regexp
	repl string
	// valueAfter is the group that ends right before the secret value, for the
	// patterns whose value may be a command substitution instead.
	valueAfter int
}{
	// PEM private keys, whole block.
	{regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`), Masked, 0},
	// Credentials in URLs: scheme://user:password@host.
	{regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@`), "${1}" + Masked + "@", 0},
	// Secret-looking names followed by a value, as in query strings, headers, env
	// assignments, flags and JSON: token=..., "password": "...", --api-key ..., Authorization: Bearer ...
	{regexp.MustCompile(`(?i)(\b(?:x-)?(?:[a-z0-9]+[-_])*` + secretName + `["']?\s*[:=]\s*["']?)(?:(?:basic|bearer|token)\s+)?[^\s"'&,;}]{3,}`), "${1}" + Masked, 1},
	// The same names as command-line flags: --api-key VALUE, --password VALUE.
	{regexp.MustCompile(`(?i)(--?(?:[a-z0-9]+-)*` + secretName + `[ \t]+)[^\s-][^\s]{2,}`), "${1}" + Masked, 1},
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

// Secrets returns s with secrets replaced by [MASKED]: bearer tokens, API keys, passwords,
// secret-looking query and header values, credentials in URLs, private keys, JWTs and
// well-known token shapes. Each literal (for example a configured API key) is masked
// wherever it appears, also URL-encoded, whatever its shape.
//
// First it escapes what would change what a terminal shows: C0 and C1 control
// characters other than newline and tab (an ANSI escape, a carriage return that
// rewrites a line), bidirectional overrides and isolates, and invisible formatting
// characters, as \xNN or \uNNNN; bytes that are not UTF-8 as \xNN.
func Secrets(s string, literals ...string) string {
	return secrets(s, nil, literals)
}

// Command masks a call's input for the approver who decides whether it runs. It is
// Secrets, except that a value after a secret-looking name stays visible when the
// call can use it as code or as an argument, for masking must never hide what runs:
// run_token=uname; $run_token -a would otherwise be shown as run_token=[MASKED],
// hiding the program. A value stays visible when its name appears anywhere else in s
// (an expansion $NAME or ${NAME}, an indirect reference ref=NAME, arithmetic), or
// when s reaches variables without naming them (eval, ${!…}, a nameref, the
// declaring and exporting builtins, env, printenv, set, compgen, source). A secret
// assigned and used is then shown to the approver; it is in the ToolIntent's input
// as proposed anyway, which the same people may read. Token shapes (private keys,
// sk-…, AKIA…, JWTs, bearer tokens, credentials in URLs) are always masked.
func Command(s string, literals ...string) string {
	return secrets(s, func(name string) bool { return !usedAsCode(s, name) }, literals)
}

// indirection are the words by which a shell command reaches a variable's value
// without naming it.
var indirection = regexp.MustCompile(`\$\{!|(?:^|[^A-Za-z0-9_-])(?:eval|declare|typeset|local|export|readonly|env|printenv|set|compgen|source|mapfile|readarray)(?:$|[^A-Za-z0-9_-])|(?:^|[\s;&|(])\.\s`)

// usedAsCode says whether the command s may use the value of the variable name as
// something that runs or an argument to it (see Command).
func usedAsCode(s, name string) bool {
	if indirection.MatchString(s) {
		return true
	}
	return len(regexp.MustCompile(`(?:^|[^A-Za-z0-9_])`+regexp.QuoteMeta(name)+`(?:$|[^A-Za-z0-9_])`).FindAllStringIndex(s, 2)) > 1
}

// secrets is Secrets; mask, when not nil, says whether the value after a secret
// name may be masked.
func secrets(s string, mask func(name string) bool, literals []string) string {
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
	for _, p := range patterns {
		if p.valueAfter == 0 {
			s = p.re.ReplaceAllString(s, p.repl)
			continue
		}
		s = replaceValues(p.re, p.valueAfter, s, mask)
	}
	return s
}

// substitutions start the shell constructs that run something where a value stands.
var substitutions = []string{"$(", "`", "${", "<(", ">("}

// replaceValues masks the value after group g of each match of re, up to the first
// substitution in it: password=abc$(cat key) is password=[MASKED]$(cat key), and
// password=$(cat key) is left as it is, for an approver must see what runs.
func replaceValues(re *regexp.Regexp, g int, s string, mask func(name string) bool) string {
	idx := re.FindAllStringSubmatchIndex(s, -1)
	if idx == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range idx {
		end, valueStart := m[1], m[2*g+1]
		value := s[valueStart:end]
		if mask != nil && !mask(leadingName(s[m[0]:valueStart])) {
			continue
		}
		cut := len(value)
		for _, sub := range substitutions {
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

// leadingName is the name a secret pattern matched at: the identifier its match
// starts with, after any leading dashes of a flag.
func leadingName(match string) string {
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

// Escape writes the characters that change what a terminal or an editor shows
// (control, bidirectional and invisible formatting characters, invalid UTF-8) as
// visible escapes, and leaves everything else, newlines and tabs included.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hidden(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			for _, r := range s {
				if r == utf8.RuneError || hidden(r) {
					return true
				}
			}
			return !utf8.ValidString(s)
		}
	}
	return false
}

// hidden reports the characters that change how the text around them is shown.
func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r == 0x061c || r == 0x180e || r == 0xfeff:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2060 && r <= 0x206f:
		return true
	}
	return false
}
