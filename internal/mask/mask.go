// Package mask prepares untrusted text before it reaches a person or a model (audit
// lines, events, observation summaries, approval requests, turn records, the CLI,
// error messages): it escapes the characters that change what a terminal shows
// (control characters, bidirectional overrides, invisible formatting) and replaces
// secrets with Masked.
//
// Secrets are found by gitleaks' maintained default rules (detector.go), by
// toolgate's own patterns where gitleaks has none (patterns.go), in every value of
// a Kubernetes Secret's data (kubesecret.go), and as configured literals. Detection
// runs on views of the text that undo terminal escapes and line wrapping
// (view.go); what it finds is masked in the text as written.
//
// Masking is best effort; it is a second line of defence behind keeping secrets out
// of tool calls in the first place. It errs on the side of masking, but never hides
// what runs: a command or substitution in a secret's place (password=$(cat key))
// stays visible, so an approver sees every part of a call. The marker is the same
// for every secret: it never tells a secret's length, prefix or kind (see Masked).
// The result is stable: masking a masked text changes nothing.
package mask

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Masked replaces every secret found. It is one fixed marker, not one per rule
// ([MASKED:aws-access-token]): the kind would tell nothing of the value, but it is
// reported once, where it is useful (Find, Redacted), while the marker stays the
// same text whichever gitleaks release found it, so masked records compare equal
// across upgrades that rename or split rules (replay and trace compare them), and
// nothing in the masked text is shaped by the secret.
const Masked = "[MASKED]"

// Secrets returns s with secrets replaced by [MASKED]: what gitleaks' rules find
// (provider keys and tokens, private keys, JWTs, generic high-entropy values after a
// secret-looking name), bearer tokens, passwords and other values after a
// secret-looking name, credentials in URLs, the data of a Kubernetes Secret. Each
// literal (for example a configured API key) is masked wherever it appears, also
// URL-encoded, whatever its shape.
//
// It also escapes what would change what a terminal shows: C0 and C1 control
// characters other than newline and tab (an ANSI escape, a carriage return that
// rewrites a line), bidirectional overrides and isolates, and invisible formatting
// characters, as \xNN or \uNNNN; bytes that are not UTF-8 as \xNN.
func Secrets(s string, literals ...string) string {
	out, _ := find(s, nil, literals)
	return out
}

// Find is Secrets, and also returns the names of the rules that found a secret,
// sorted and each once: gitleaks' rule IDs ("aws-access-token", "private-key",
// "generic-api-key", …) and toolgate's own ("secret-assignment", "bearer-token",
// "url-credentials", "kubernetes-secret-data", "literal", …; see patterns.go).
func Find(s string, literals ...string) (masked string, found []string) {
	return find(s, nil, literals)
}

// Redacted says what Find found, for a record: "2 secrets redacted
// (aws-access-token, private-key)"; empty when count is 0. count is the number of
// secrets masked, found the rules that found them.
func Redacted(count int, found []string) string {
	switch {
	case count <= 0:
		return ""
	case count == 1:
		return fmt.Sprintf("1 secret redacted (%s)", strings.Join(found, ", "))
	}
	return fmt.Sprintf("%d secrets redacted (%s)", count, strings.Join(found, ", "))
}

// Count returns how many secrets a text masked by Secrets or Find holds.
func Count(masked string) int {
	return strings.Count(masked, Masked)
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
// as proposed anyway, which the same people may read. Token shapes (what gitleaks'
// provider rules find, private keys, sk-…, AKIA…, JWTs, bearer tokens, credentials
// in URLs) are always masked.
func Command(s string, literals ...string) string {
	out, _ := find(s, func(name string) bool { return !usedAsCode(s, name) }, literals)
	return out
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

// find is Find; mask, when not nil, says whether the value after a secret name
// may be masked.
func find(s string, mask func(name string) bool, literals []string) (string, []string) {
	if s == "" {
		return s, nil
	}
	clean := cleanView(s)
	var spans []span
	add := func(v view, found []span) {
		for _, sp := range found {
			spans = append(spans, v.toOriginal(sp)...)
		}
	}
	add(clean, detectSecrets(clean.text))
	add(clean, ownSecrets(clean.text))
	add(clean, secretData(clean.text))
	add(clean, literalSpans(clean.text, literals))
	if v, ok := unescapedView(clean.text); ok {
		// Found in the unescaped view, mapped through both.
		for _, found := range [][]span{detectSecrets(v.text), ownSecrets(v.text), secretData(v.text)} {
			for _, sp := range found {
				add(clean, v.toOriginal(sp))
			}
		}
	}
	for _, v := range joinedViews(clean.text) {
		// A joined view is of the clean view's text; map through both.
		for _, sp := range detectSecrets(v.text) {
			add(clean, v.toOriginal(sp))
		}
	}
	// Literals also where the original has them (one with a control character).
	spans = append(spans, literalSpans(s, literals)...)

	kept := spans[:0]
	for _, sp := range spans {
		if sp.name != "" {
			if mask != nil && !mask(sp.name) {
				continue
			}
			if !cutAtSubstitution(s, &sp) {
				continue
			}
		}
		kept = append(kept, sp)
	}
	if len(kept) == 0 {
		return Escape(s), nil
	}
	return write(s, kept), rules(kept)
}

// write returns s with the spans masked and the rest escaped. Overlapping and
// touching spans are masked as one.
func write(s string, spans []span) string {
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		for i++; i < len(spans) && spans[i].start <= end; i++ {
			end = max(end, spans[i].end)
		}
		if start < last {
			start = last
		}
		b.WriteString(Escape(s[last:start]))
		b.WriteString(Masked)
		last = end
	}
	b.WriteString(Escape(s[last:]))
	return b.String()
}
