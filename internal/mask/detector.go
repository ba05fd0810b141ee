package mask

import (
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/logging"
	"github.com/zricethezav/gitleaks/v8/report"
)

// The detector is gitleaks' (github.com/zricethezav/gitleaks/v8): its default
// configuration carries a couple of hundred maintained rules for provider keys,
// tokens and private keys, each with keywords that a prefilter (Aho-Corasick) looks
// for before any of the rule's regular expressions runs.
//
// gitleaks scans a whole file with every rule whose keyword occurs anywhere in it;
// on a tool's output of many lines that each name an "id", a "key" or an "api", that
// runs its broadest rules (generic-api-key among them) over all of it with Go's
// linear-time matcher, about 100 ms for 64 KiB. Masking runs on every observation,
// so the text is scanned a line at a time instead: the prefilter then picks the
// rules per line, and a short input lets Go's regexp use its backtracker. A line
// longer than segmentBytes is scanned in overlapping windows. The few rules whose
// matches span lines by design (multiLineRules) run once over the whole text, only
// when their keywords occur in it.

// multiLineRules are the gitleaks rules that match across lines: a PEM block, a
// Kubernetes Secret manifest, a curl command continued with backslashes.
var multiLineRules = map[string]bool{
	"private-key":            true,
	"kubernetes-secret-yaml": true,
	"curl-auth-header":       true,
	"curl-auth-user":         true,
}

// ruleGeneric is gitleaks' rule for a secret-looking name followed by a
// high-entropy value; Command treats it like toolgate's own name patterns.
const ruleGeneric = "generic-api-key"

const (
	// segmentBytes is the longest piece of a line scanned at once.
	segmentBytes = 4096
	// segmentOverlap is how far consecutive windows of a long line overlap, so a
	// secret shorter than this is whole in one of them.
	segmentOverlap = 512
	// maxDecodeDepth lets gitleaks decode base64, hex, percent and \u escapes
	// once before it matches, so an encoded token is found too.
	maxDecodeDepth = 1
)

type detectors struct {
	// lines runs the rules that match within a line.
	lines *detect.Detector
	// whole runs multiLineRules over the whole text.
	whole *detect.Detector
}

// gitleaks builds the detectors once, on first use; they are safe for concurrent
// use (gitleaks itself scans fragments concurrently with one detector). The
// configuration is gitleaks' own default, embedded in the module, so building it
// reads no file and cannot fail but for a broken release; then masking falls back
// to toolgate's own patterns alone, and the tests fail.
var gitleaks = sync.OnceValue(gitleaksBuild)

func gitleaksBuild() *detectors {
	// gitleaks logs to stderr through a package-level logger; as a library inside a
	// controller it has nothing to say that toolgate does not report itself.
	logging.Logger = logging.Logger.Level(zerolog.Disabled)
	//
	// The configuration is the one compiled in, so it cannot fail here unless the
	// module itself is broken; masking without the detector would pass every
	// provider key its rules know, so that stops the process instead (every test
	// that masks would fail first).
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		panic("mask: reading gitleaks' default configuration: " + err.Error())
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		panic("mask: reading gitleaks' default configuration: " + err.Error())
	}
	cfg, err := vc.Translate()
	if err != nil {
		panic("mask: gitleaks' default configuration: " + err.Error())
	}
	lightenAllowlists(&cfg)
	lines, whole := split(cfg, func(r config.Rule) bool { return !multiLineRules[r.RuleID] })
	d := &detectors{lines: detect.NewDetector(lines), whole: detect.NewDetector(whole)}
	d.lines.MaxDecodeDepth = maxDecodeDepth
	d.whole.MaxDecodeDepth = 0
	return d
}

// lightenAllowlists makes each allowlist of cfg again without the index gitleaks
// builds over its stop words (an Aho-Corasick trie): the default configuration's
// ~1,500 stop words take about 9 MiB of heap that way, for the whole life of the
// controller, against toolgate's memory budget (docs/benchmarks.md). Without it
// gitleaks checks a finding's stop words one by one (Allowlist.ContainsStopWord),
// which only a finding of a rule with stop words pays, and only once per finding.
// The stop words are lowercased here, as the trie's builder would have.
func lightenAllowlists(cfg *config.Config) {
	light := func(lists []*config.Allowlist) []*config.Allowlist {
		out := make([]*config.Allowlist, 0, len(lists))
		for _, a := range lists {
			words := make([]string, len(a.StopWords))
			for i, w := range a.StopWords {
				words[i] = strings.ToLower(w)
			}
			out = append(out, &config.Allowlist{
				Description: a.Description, MatchCondition: a.MatchCondition, Commits: a.Commits,
				Paths: a.Paths, RegexTarget: a.RegexTarget, Regexes: a.Regexes, StopWords: words,
			})
		}
		return out
	}
	cfg.Allowlists = light(cfg.Allowlists)
	for id, r := range cfg.Rules {
		r.Allowlists = light(r.Allowlists)
		cfg.Rules[id] = r
	}
}

// split divides cfg's rules into those keep accepts and the rest, each with its
// own keywords.
func split(cfg config.Config, keep func(config.Rule) bool) (config.Config, config.Config) {
	part := func(want bool) config.Config {
		c := cfg
		c.Rules = map[string]config.Rule{}
		c.Keywords = map[string]struct{}{}
		c.OrderedRules = nil
		for _, id := range cfg.OrderedRules {
			r := cfg.Rules[id]
			if keep(r) != want {
				continue
			}
			c.Rules[id] = r
			c.OrderedRules = append(c.OrderedRules, id)
			for _, k := range r.Keywords {
				c.Keywords[strings.ToLower(k)] = struct{}{}
			}
		}
		return c
	}
	return part(true), part(false)
}

// span is a part of a text to mask: [start, end) in bytes, and the rule that
// found it.
type span struct {
	start, end int
	rule       string
	// name is the secret-looking name the value follows, for the rules that
	// match a name and a value (toolgate's and gitleaks' generic one); Command
	// shows the value when the call uses that name as code.
	name string
}

// detectSecrets returns what gitleaks finds in s.
func detectSecrets(s string) []span {
	d := gitleaks()
	if s == "" {
		return nil
	}
	var spans []span
	forLines(s, func(start, end int) {
		spans = append(spans, detectLine(d.lines, s, start, end)...)
	})
	spans = append(spans, findingSpans(s, 0, len(s), d.whole.DetectString(s))...)
	return spans
}

// forLines calls scan with each line of s, and the next line with it when the
// line ends in an operator: gitleaks' rules (and toolgate's) allow a value after
// whitespace that a line break is part of (<token>\n  VALUE, key:\n  VALUE).
func forLines(s string, scan func(start, end int)) {
	for start := 0; start < len(s); {
		end := lineEnd(s, start)
		segmentEnd := end
		if end < len(s) && endsInOperator(s[start:end]) {
			segmentEnd = lineEnd(s, end+1)
		}
		scan(start, segmentEnd)
		start = end + 1
	}
}

// lineEnd returns where the line that starts at start ends: at its newline or
// at the end of s.
func lineEnd(s string, start int) int {
	if i := strings.IndexByte(s[start:], '\n'); i >= 0 {
		return start + i
	}
	return len(s)
}

// endsInOperator reports a line that ends, but for spaces, in what gitleaks'
// rules take for the operator between a name and its value.
func endsInOperator(line string) bool {
	line = strings.TrimRight(line, " \t\r")
	return line != "" && strings.IndexByte("=>:,|", line[len(line)-1]) >= 0
}

// detectLine scans s[start:end], a line or two, in windows of at most
// segmentBytes.
func detectLine(d *detect.Detector, s string, start, end int) []span {
	var spans []span
	for w := start; w < end; w += segmentBytes - segmentOverlap {
		e := min(w+segmentBytes, end)
		spans = append(spans, findingSpans(s, w, e, d.DetectString(s[w:e]))...)
		if e == end {
			break
		}
	}
	return spans
}

// findingSpans places gitleaks' findings in s, where the fragment it scanned is
// s[offset:fragmentEnd]. A finding says where its match is by line and column (the
// columns of a line after the first counted from the newline before it, as
// gitleaks counts them); the span is the secret inside the match, or the whole
// match when the secret was found in a decoded form (base64, hex, percent or \u
// escapes) and the match is its encoded text.
func findingSpans(s string, offset, fragmentEnd int, findings []report.Finding) []span {
	if len(findings) == 0 {
		return nil
	}
	var newlines []int
	for i := offset; i < fragmentEnd; i++ {
		if s[i] == '\n' {
			newlines = append(newlines, i-offset)
		}
	}
	base := func(line int) int {
		if line <= 0 || line > len(newlines) {
			return 0
		}
		return newlines[line-1]
	}
	var spans []span
	for _, f := range findings {
		start := offset + base(f.StartLine) + f.StartColumn - 1
		end := offset + base(f.EndLine) + f.EndColumn
		if start < offset || end > fragmentEnd || start >= end {
			// Not where gitleaks said: mask the secret wherever it occurs.
			spans = append(spans, occurrences(s, f.Secret, f.RuleID)...)
			continue
		}
		sp := span{start: start, end: end, rule: f.RuleID}
		if i := strings.Index(s[start:end], f.Secret); f.Secret != "" && i >= 0 {
			sp.start, sp.end = start+i, start+i+len(f.Secret)
			if f.RuleID == ruleGeneric {
				sp.name = leadingName(s[start:sp.start])
				// A full stop after a value ends the sentence, not the value.
				for sp.end > sp.start+1 && s[sp.end-1] == '.' {
					sp.end--
				}
			}
		}
		spans = append(spans, sp)
	}
	return spans
}

// occurrences returns a span for each occurrence of secret in s, when the
// secret is long enough to be told from ordinary text.
func occurrences(s, secret, rule string) []span {
	if len(secret) < minLiteral {
		return nil
	}
	var spans []span
	for i := 0; ; {
		j := strings.Index(s[i:], secret)
		if j < 0 {
			return spans
		}
		spans = append(spans, span{start: i + j, end: i + j + len(secret), rule: rule})
		i += j + len(secret)
	}
}

// rules returns the distinct rules of spans, sorted.
func rules(spans []span) []string {
	seen := map[string]bool{}
	var out []string
	for _, sp := range spans {
		if !seen[sp.rule] {
			seen[sp.rule] = true
			out = append(out, sp.rule)
		}
	}
	sort.Strings(out)
	return out
}

// Rules returns the IDs of the gitleaks rules detection runs, sorted: those of its
// default configuration. Toolgate's own patterns add theirs (see patterns.go).
func Rules() []string {
	d := gitleaks()
	if d == nil {
		return nil
	}
	var ids []string
	for _, c := range []config.Config{d.lines.Config, d.whole.Config} {
		ids = append(ids, c.OrderedRules...)
	}
	sort.Strings(ids)
	return ids
}
