// Package policy decides what happens to a proposed tool call: it classifies bash
// commands with a real shell parser, compiles ToolPolicies and ClusterToolPolicies
// (globs, argv patterns, CEL, examples), and decides Allow, Ask or Deny with a reason
// a person can check. Everything here is a pure function of its inputs.
package policy

import (
	"strings"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// strictness orders the categories from harmless to most dangerous; the strictest
// part of a command gives the command its category.
//
//	ReadOnly < Test < Build < Write < Delete < Install < Network < VCSDestructive < Privilege < Unknown
//
// Why this order: tests and builds run the project's own code inside the sandbox;
// writes change the workspace; deletes lose files; installs fetch and run
// third-party code; network calls can carry data out of the sandbox (whose egress is
// denied by default); destroying version-control history (git push --force, reset
// --hard) loses work that cannot be recovered from inside the sandbox, and a forced
// push is both network and destructive; privilege escapes the sandbox's limits; and
// what we cannot tell could be any of these.
var strictness = map[v1alpha1.CommandCategory]int{
	v1alpha1.CategoryReadOnly:       0,
	v1alpha1.CategoryTest:           1,
	v1alpha1.CategoryBuild:          2,
	v1alpha1.CategoryWrite:          3,
	v1alpha1.CategoryDelete:         4,
	v1alpha1.CategoryInstall:        5,
	v1alpha1.CategoryNetwork:        6,
	v1alpha1.CategoryVCSDestructive: 7,
	v1alpha1.CategoryPrivilege:      8,
	v1alpha1.CategoryUnknown:        9,
}

// categoryList names the categories from harmless to most dangerous, for errors.
func categoryList() string {
	names := make([]string, len(strictness))
	for c, r := range strictness {
		names[r] = string(c)
	}
	return strings.Join(names, ", ")
}

// Stricter reports whether category a is stricter than b. A category outside the
// known set counts as unknown.
func Stricter(a, b v1alpha1.CommandCategory) bool {
	return rank(a) > rank(b)
}

func rank(c v1alpha1.CommandCategory) int {
	if r, ok := strictness[c]; ok {
		return r
	}
	return strictness[v1alpha1.CategoryUnknown]
}

// RiskOf is the default risk of a category; a rule's own risk takes precedence.
func RiskOf(c v1alpha1.CommandCategory) v1alpha1.Risk {
	switch c {
	case v1alpha1.CategoryReadOnly:
		return v1alpha1.RiskLow
	case v1alpha1.CategoryTest, v1alpha1.CategoryBuild, v1alpha1.CategoryWrite:
		return v1alpha1.RiskMedium
	case v1alpha1.CategoryPrivilege:
		return v1alpha1.RiskCritical
	default:
		return v1alpha1.RiskHigh
	}
}

// strictestOf returns the strictest of the categories.
func strictestOf(cs ...v1alpha1.CommandCategory) v1alpha1.CommandCategory {
	out := v1alpha1.CategoryReadOnly
	for _, c := range cs {
		if Stricter(c, out) {
			out = c
		}
	}
	return out
}
