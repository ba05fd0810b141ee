// Package unidiff computes line diffs (Myers, bounded) and prints them as unified
// diffs. It is its own package so that the kubectl plugin, which prints diffs too,
// does not link the runner (Linux-only: openat2, prctl), which prints them for edits.
package unidiff

import (
	"fmt"
	"strings"
)

// maxDiffEdits bounds the Myers search. Past it (two files that share almost nothing
// and are long), the differing middle is reported as all removed and all added: still
// a correct diff, only not the shortest, and it keeps time and memory bounded.
const maxDiffEdits = 1000

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

type opKind byte

const (
	opEqual  opKind = ' '
	opDelete opKind = '-'
	opInsert opKind = '+'
)

type lineOp struct {
	kind opKind
	text string // the line with its "\n", if it had one
}

// SplitLines splits b into lines that keep their "\n"; a last line without one is kept.
func SplitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffLines returns the edit script from a to b. Lines compare with their newline, so
// adding or removing a final newline changes the last line.
func diffLines(a, b []string) []lineOp {
	prefix := 0
	for prefix < len(a) && prefix < len(b) && a[prefix] == b[prefix] {
		prefix++
	}
	suffix := 0
	for suffix < len(a)-prefix && suffix < len(b)-prefix && a[len(a)-1-suffix] == b[len(b)-1-suffix] {
		suffix++
	}
	ops := make([]lineOp, 0, len(a)+len(b)-prefix-suffix)
	for _, l := range a[:prefix] {
		ops = append(ops, lineOp{opEqual, l})
	}
	midA, midB := a[prefix:len(a)-suffix], b[prefix:len(b)-suffix]
	if mid, ok := myers(midA, midB, maxDiffEdits); ok {
		ops = append(ops, mid...)
	} else {
		for _, l := range midA {
			ops = append(ops, lineOp{opDelete, l})
		}
		for _, l := range midB {
			ops = append(ops, lineOp{opInsert, l})
		}
	}
	for _, l := range a[len(a)-suffix:] {
		ops = append(ops, lineOp{opEqual, l})
	}
	return ops
}

// myers is Myers' O(ND) shortest edit script. It keeps, for each edit distance d, the
// furthest-reaching x of every diagonal k in [-d, d], and walks them back to build the
// script. It gives up (ok false) when more than maxD edits are needed.
func myers(a, b []string, maxD int) (ops []lineOp, ok bool) {
	n, m := len(a), len(b)
	if maxD > n+m {
		maxD = n + m
	}
	offset := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int // trace[d][k+d] is v[k] after step d
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[offset+k-1] < v[offset+k+1]) {
				x = v[offset+k+1] // down: insert b[y]
			} else {
				x = v[offset+k-1] + 1 // right: delete a[x]
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[offset+k] = x
			if x >= n && y >= m {
				trace = append(trace, append([]int(nil), v[offset-d:offset+d+1]...))
				return backtrack(a, b, trace), true
			}
		}
		trace = append(trace, append([]int(nil), v[offset-d:offset+d+1]...))
	}
	return nil, false
}

func backtrack(a, b []string, trace [][]int) []lineOp {
	at := func(d, k int) int { return trace[d][k+d] }
	x, y := len(a), len(b)
	var rev []lineOp
	for d := len(trace) - 1; d > 0; d-- {
		k := x - y
		var prevK int
		if k == -d || (k != d && at(d-1, k-1) < at(d-1, k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(d-1, prevK)
		prevY := prevX - prevK
		// The snake: equal lines after the edit.
		for x > prevX && y > prevY {
			rev = append(rev, lineOp{opEqual, a[x-1]})
			x--
			y--
		}
		if x == prevX {
			rev = append(rev, lineOp{opInsert, b[y-1]})
			y--
		} else {
			rev = append(rev, lineOp{opDelete, a[x-1]})
			x--
		}
	}
	for x > 0 && y > 0 {
		rev = append(rev, lineOp{opEqual, a[x-1]})
		x--
		y--
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// DiffStats returns the number of lines added and removed going from old to new.
func DiffStats(old, new []byte) (added, removed int) {
	for _, op := range diffLines(SplitLines(old), SplitLines(new)) {
		switch op.kind {
		case opInsert:
			added++
		case opDelete:
			removed++
		}
	}
	return added, removed
}

// UnifiedDiff returns the unified diff (as diff -u, with diffContext lines of context)
// from old to new for the file name, and the lines added and removed. It is empty
// when the contents are equal.
func UnifiedDiff(name string, old, new []byte) (diff string, added, removed int) {
	ops := diffLines(SplitLines(old), SplitLines(new))
	var changes []int
	for i, op := range ops {
		switch op.kind {
		case opInsert:
			added++
			changes = append(changes, i)
		case opDelete:
			removed++
			changes = append(changes, i)
		}
	}
	if len(changes) == 0 {
		return "", 0, 0
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- a/%s\n+++ b/%s\n", name, name)
	// oldLine[i] and newLine[i]: lines of each side before ops[i].
	oldLine := make([]int, len(ops)+1)
	newLine := make([]int, len(ops)+1)
	for i, op := range ops {
		oldLine[i+1], newLine[i+1] = oldLine[i], newLine[i]
		if op.kind != opInsert {
			oldLine[i+1]++
		}
		if op.kind != opDelete {
			newLine[i+1]++
		}
	}
	for c := 0; c < len(changes); {
		start := max(changes[c]-diffContext, 0)
		end := changes[c] + 1
		// Merge changes whose context would touch or overlap.
		for c++; c < len(changes) && changes[c]-diffContext <= end+diffContext; c++ {
			end = changes[c] + 1
		}
		end = min(end+diffContext, len(ops))
		oldCount, newCount := oldLine[end]-oldLine[start], newLine[end]-newLine[start]
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(oldLine[start], oldCount), hunkRange(newLine[start], newCount))
		for _, op := range ops[start:end] {
			sb.WriteByte(byte(op.kind))
			sb.WriteString(op.text)
			if !strings.HasSuffix(op.text, "\n") {
				sb.WriteString("\n\\ No newline at end of file\n")
			}
		}
	}
	return sb.String(), added, removed
}

// hunkRange formats one side of a hunk header: the first line (1-based) and the count,
// or for an empty side the line after which it applies, as diff -u does.
func hunkRange(before, count int) string {
	if count == 0 {
		return fmt.Sprintf("%d,0", before)
	}
	if count == 1 {
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, count)
}
