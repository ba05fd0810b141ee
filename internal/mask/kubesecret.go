package mask

import (
	"regexp"
	"strings"
)

// A Kubernetes Secret's data values are secrets by declaration, whatever they
// hold: `kubectl get secret -o yaml` prints them base64-encoded, where a detector
// sees only high-entropy text, and a short password encoded is no token shape at
// all. They are masked whole, without decoding: decoding would only decide which
// of them to show, and the name of the key (password, tls.key) stays visible.
// gitleaks' kubernetes-secret-yaml rule reports the first value after data:; this
// covers every value, stringData: too, in YAML and in JSON (-o json).

// secretKind finds a manifest that is a Secret, in YAML or JSON.
var secretKind = regexp.MustCompile(`(?m)^[ \t]*(?:-[ \t]+)?"?kind"?[ \t]*:[ \t]*["']?Secret["']?[ \t]*,?[ \t]*$`)

// dataKey starts a data or stringData map: YAML `data:` alone on its line, or
// JSON `"data": {`.
var dataKey = regexp.MustCompile(`(?m)^([ \t]*(?:-[ \t]+)?)(?:(?:data|stringData):[ \t]*$|"(?:data|stringData)"[ \t]*:[ \t]*\{[ \t]*$)`)

// yamlEntry is one `key: value` line of a map, value possibly a block (| or >).
var yamlEntry = regexp.MustCompile(`^([ \t]*)("[^"]*"|'[^']*'|[^:\s][^:]*?):[ \t]*(\S.*?)?[ \t]*$`)

// jsonEntry is one `"key": "value"` line of a JSON object.
var jsonEntry = regexp.MustCompile(`^[ \t]*"(?:[^"\\]|\\.)*"[ \t]*:[ \t]*"((?:[^"\\]|\\.)*)",?[ \t]*$`)

// secretData returns the values of the data and stringData maps of the Secrets in
// s. Only text that names kind: Secret is read; in a list that mixes Secrets with
// other kinds, the other kinds' data maps are masked too, which errs on the side of
// masking.
func secretData(s string) []span {
	if !strings.Contains(s, "Secret") || !secretKind.MatchString(s) {
		return nil
	}
	var spans []span
	for _, m := range dataKey.FindAllStringSubmatchIndex(s, -1) {
		json := strings.HasSuffix(strings.TrimRight(s[m[0]:m[1]], " \t"), "{")
		// The lines of the map follow the key's line.
		pos := m[1]
		if pos < len(s) && s[pos] == '\n' {
			pos++
		} else if i := strings.IndexByte(s[pos:], '\n'); i >= 0 {
			pos += i + 1
		} else {
			continue
		}
		keyIndent := len(s[m[2]:m[3]])
		if json {
			spans = append(spans, jsonValues(s, pos)...)
		} else {
			spans = append(spans, yamlValues(s, pos, keyIndent)...)
		}
	}
	return spans
}

// yamlValues returns the values of the map whose lines start at pos, indented more
// than keyIndent; a block value (key: |) is its following, deeper lines.
func yamlValues(s string, pos, keyIndent int) []span {
	var spans []span
	entryIndent := -1
	blockIndent := -1 // inside a block value, the indentation of its entry
	for pos < len(s) {
		end := strings.IndexByte(s[pos:], '\n')
		if end < 0 {
			end = len(s)
		} else {
			end += pos
		}
		line := s[pos:end]
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		switch {
		case strings.TrimSpace(line) == "":
		case blockIndent >= 0 && indent > blockIndent:
			spans = append(spans, span{start: pos + indent, end: end, rule: "kubernetes-secret-data"})
		case indent <= keyIndent || (entryIndent >= 0 && indent < entryIndent):
			return spans
		default:
			blockIndent = -1
			m := yamlEntry.FindStringSubmatchIndex(line)
			if m == nil {
				return spans
			}
			if entryIndent < 0 {
				entryIndent = indent
			}
			if m[6] < 0 {
				break
			}
			value := line[m[6]:m[7]]
			if value == "|" || value == ">" || strings.HasPrefix(value, "|") || strings.HasPrefix(value, ">") {
				blockIndent = indent
				break
			}
			spans = append(spans, span{start: pos + m[6], end: pos + m[7], rule: "kubernetes-secret-data"})
		}
		pos = end + 1
	}
	return spans
}

// jsonValues returns the string values of the JSON object whose lines start at
// pos, up to its closing brace.
func jsonValues(s string, pos int) []span {
	var spans []span
	for pos < len(s) {
		end := strings.IndexByte(s[pos:], '\n')
		if end < 0 {
			end = len(s)
		} else {
			end += pos
		}
		line := s[pos:end]
		if strings.HasPrefix(strings.TrimSpace(line), "}") {
			return spans
		}
		if m := jsonEntry.FindStringSubmatchIndex(line); m != nil && m[3] > m[2] {
			spans = append(spans, span{start: pos + m[2], end: pos + m[3], rule: "kubernetes-secret-data"})
		}
		pos = end + 1
	}
	return spans
}
