package policy

import (
	"fmt"
	"time"

	"github.com/toolgate/toolgate/api/v1alpha1"
)

// Fires is how often a rule acted in one task, and when it last did: read from the
// task's recorded decisions and completion checks (pipeline.RuleFires), so that a
// controller restart or a turn driven again counts what was recorded, not what a
// process remembers.
type Fires struct {
	Count int32
	Last  time.Time
}

// FireCounts gives a rule's Fires by its status.ruleFires id (the rule's
// PolicyRuleReference.String); nil counts none. It is asked only for
// a matching rule that has limits, so a decision pays for reading the history only
// when a limit could change it.
type FireCounts func(key string) Fires

func (fc FireCounts) of(p *CompiledPolicy, r *rule) Fires {
	if fc == nil || (r.maxFires() == 0 && r.spec.CooldownSeconds == nil) {
		return Fires{}
	}
	return fc(p.RuleRef(r.spec.Name).String())
}

// defaultCompletionMaxFires is how often a Completion rule acts in a task when it
// sets no maxFires: once, so a check the model cannot satisfy does not hold the task
// in a loop of refused answers.
const defaultCompletionMaxFires = 1

// maxFires is the rule's limit, or 0 for none.
func (r *rule) maxFires() int32 {
	switch {
	case r.spec.MaxFires != nil:
		return *r.spec.MaxFires
	case r.completion() && r.spec.Action == v1alpha1.RuleRedirect:
		return defaultCompletionMaxFires
	}
	return 0
}

// limited says why the rule, which would act, does not: it acted maxFires times in
// the task already, or it acted less than cooldownSeconds before now. Only Redirect
// and Replace rules have limits (the API and Compile refuse them elsewhere): a limit never lets
// a call through that a Deny, Ask or Stop would have held.
func (r *rule) limited(f Fires, now time.Time) string {
	if r.spec.Action != v1alpha1.RuleRedirect && r.spec.Action != v1alpha1.RuleReplace {
		return ""
	}
	if limit := r.maxFires(); limit > 0 && f.Count >= limit {
		return fmt.Sprintf("maxFires %d reached: it acted %d times in this task", limit, f.Count)
	}
	if c := r.spec.CooldownSeconds; c != nil && f.Count > 0 && !f.Last.IsZero() {
		// A fire after now (a call decided again is measured when it was first
		// decided) is no reason to rest.
		if since := now.Sub(f.Last); since >= 0 && since < time.Duration(*c)*time.Second {
			return fmt.Sprintf("cooldownSeconds %d: it acted %s ago", *c, since.Round(time.Second))
		}
	}
	return ""
}
