package policy

import (
	"iter"
	"math/bits"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// ruleIndex finds the rules of one policy that could match a call, so that a decision
// evaluates those rules and not every rule. Each rule is filed under one condition
// that every call it matches meets (see ruleKeyOf); a call looks up the keys its facts
// have, and a rule it does not reach could not have matched it. The reached rules are
// then evaluated in full, in policy order, so the index changes which rules are looked
// at, never what a decision is.
type ruleIndex struct {
	// byCommand holds the rules with commands, under each first word of each pattern.
	byCommand map[string][]int
	// withPath holds the rules with paths and no commands.
	withPath []int
	// byCategory holds the rules with categories and neither commands nor paths.
	byCategory map[v1alpha1.CommandCategory][]int
	// byTool holds the rules with tools and no commands, paths or categories.
	byTool map[v1alpha1.ToolName][]int
	// always holds the rules that restrict none of those: an empty match or CEL only.
	always []int
	// rules is the number of rules indexed, the size of a candidate set.
	rules int
}

// ruleKeyKind says which condition a rule is filed under.
type ruleKeyKind int

const (
	keyAlways ruleKeyKind = iota
	keyCommand
	keyPath
	keyCategory
	keyTool
)

// ruleKey is the condition a rule is filed under: the most selective one it has that
// a call must meet for the rule to match.
//
//   - commands: some part's argv must start with a pattern, so its first word is
//     the first word of one of the patterns (for Allow rules too: an Allow rule must
//     cover at least one part).
//   - paths: the call must have a path.
//   - categories: some part must have one of them (again, an Allow rule must cover at
//     least one part).
//   - tools: the call's tool must be one of them.
//
// A CEL condition is no key: what an expression needs cannot be read off it.
type ruleKey struct {
	kind       ruleKeyKind
	commands   []string
	categories []v1alpha1.CommandCategory
	tools      []v1alpha1.ToolName
}

func ruleKeyOf(r *rule) ruleKey {
	switch {
	case len(r.commands) > 0:
		var words []string
		for _, pattern := range r.commands {
			words = append(words, pattern[0])
		}
		return ruleKey{kind: keyCommand, commands: words}
	case len(r.paths) > 0:
		return ruleKey{kind: keyPath}
	case len(r.categories) > 0:
		return ruleKey{kind: keyCategory, categories: r.categories}
	case len(r.tools) > 0:
		return ruleKey{kind: keyTool, tools: r.tools}
	}
	return ruleKey{kind: keyAlways}
}

// indexRules files every rule under its key. A rule filed twice under one key (two
// patterns starting with the same word) is listed twice; marking it twice is
// harmless.
func indexRules(rules []*rule) *ruleIndex {
	ix := &ruleIndex{
		byCommand:  map[string][]int{},
		byCategory: map[v1alpha1.CommandCategory][]int{},
		byTool:     map[v1alpha1.ToolName][]int{},
		rules:      len(rules),
	}
	for i, r := range rules {
		key := ruleKeyOf(r)
		switch key.kind {
		case keyCommand:
			for _, w := range key.commands {
				ix.byCommand[w] = append(ix.byCommand[w], i)
			}
		case keyPath:
			ix.withPath = append(ix.withPath, i)
		case keyCategory:
			for _, c := range key.categories {
				ix.byCategory[c] = append(ix.byCategory[c], i)
			}
		case keyTool:
			for _, t := range key.tools {
				ix.byTool[t] = append(ix.byTool[t], i)
			}
		default:
			ix.always = append(ix.always, i)
		}
	}
	return ix
}

// candidateSet is a set of rule positions, one bit each, so that rules reached
// through several keys are evaluated once and in policy order.
type candidateSet []uint64

func (s candidateSet) add(positions []int) {
	for _, i := range positions {
		s[i/64] |= 1 << (i % 64)
	}
}

// ascending yields the positions in the set, lowest first.
func (s candidateSet) ascending() iter.Seq[int] {
	return func(yield func(int) bool) {
		for w, word := range s {
			for word != 0 {
				if !yield(w*64 + bits.TrailingZeros64(word)) {
					return
				}
				word &= word - 1
			}
		}
	}
}

// candidates marks in set (cleared first, and grown if needed) the rules that could
// match a call with these facts, and returns it. A CompiledPolicy not made by Compile
// has no index and no rules, so nothing is marked.
func (ix *ruleIndex) candidates(f *facts, set candidateSet) candidateSet {
	if ix == nil {
		return set[:0]
	}
	words := (ix.rules + 63) / 64
	if cap(set) < words {
		set = make(candidateSet, words)
	}
	set = set[:words]
	clear(set)
	set.add(ix.always)
	set.add(ix.byTool[f.tool])
	if f.hasPath {
		set.add(ix.withPath)
	}
	for i := range f.parts {
		p := &f.parts[i]
		if len(p.Argv) > 0 {
			set.add(ix.byCommand[p.Argv[0]])
		}
	}
	for _, c := range f.categories {
		set.add(ix.byCategory[c])
	}
	return set
}
