package pipeline

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// The AwaitingApproval message names at most MaxIntentsNamedAwaiting intents and says how
// many more wait: a condition message holds at most 32768 characters, and a task may
// have thousands of intents.
func TestAwaitingApprovalMessageIsBounded(t *testing.T) {
	var intents []v1.ToolIntent
	for i := range 500 {
		name := fmt.Sprintf("t-t%d-0-%s", i, strings.Repeat("x", 200))
		intents = append(intents, makeIntent(name).turn(int32(i)).decided(v1.DecisionAsk).val())
	}
	task := makeTask(testTask).budgets(v1.Budgets{MaxIntents: 10000}).obj()
	st := TaskStatus(task, readyWorld(intents...), metav1.Now())
	c := meta.FindStatusCondition(st.Conditions, v1.ConditionAwaitingApproval)
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("AwaitingApproval: %+v", c)
	}
	if len(c.Message) > 4096 || !strings.HasSuffix(c.Message, "] and 490 more") || strings.Count(c.Message, "t-t") != v1.MaxIntentsNamedAwaiting {
		t.Fatalf("AwaitingApproval message (%d bytes): %.300q … %q", len(c.Message), c.Message, c.Message[max(len(c.Message)-40, 0):])
	}
	if got := namesUpTo([]string{"a", "b"}, v1.MaxIntentsNamedAwaiting); got != "[a b]" {
		t.Fatalf("two waiting intents: %q", got)
	}
}

// status.ruleFires shows at most MaxRuleFires rules, the ones that fired last, in
// the order RuleFires gives.
func TestRuleFiresShownAreBounded(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var fires []v1.RuleFires
	for i := range v1.MaxRuleFires + 10 {
		at := metav1.NewTime(t0.Add(time.Duration(i) * time.Minute))
		f := v1.NewRuleFires(v1.NewPolicyRuleReference(v1.PolicyRuleKindToolPolicy, "p", 0, fmt.Sprintf("r%04d", i)), v1.WhenToolCall)
		f.Fires, f.LastFiredAt = 1, &at
		fires = append(fires, f)
	}
	got := lastFired(fires, v1.MaxRuleFires)
	if len(got) != v1.MaxRuleFires || got[0].PolicyRuleRef.Rule != "r0010" || got[len(got)-1].PolicyRuleRef.Rule != fmt.Sprintf("r%04d", v1.MaxRuleFires+9) {
		t.Fatalf("%d rules shown, from %s to %s; want the %d that fired last", len(got), got[0].PolicyRuleRef.Rule, got[len(got)-1].PolicyRuleRef.Rule, v1.MaxRuleFires)
	}
	if few := lastFired(fires[:3], v1.MaxRuleFires); len(few) != 3 {
		t.Fatalf("three rules: %d shown", len(few))
	}
}

// status.result holds at most MaxResultBytes of the final answer, cut between runes,
// and says where the whole answer is.
func TestResultIsBounded(t *testing.T) {
	short := "all tests pass"
	if got := resultOf(short, 3); got != short {
		t.Fatalf("a short answer changed: %q", got)
	}
	long := strings.Repeat("é", v1.MaxResultBytes)
	got := resultOf(long, 3)
	if len(got) > v1.MaxResultBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "the whole answer is in the record of turn 3]") {
		t.Fatalf("a long answer: %d bytes, valid %t, ends %q", len(got), utf8.ValidString(got), got[max(len(got)-80, 0):])
	}
}

// status.validation.errors holds at most MaxValidationErrors errors of at most
// MaxValidationErrorBytes each, and says how many more there were.
func TestValidationErrorsAreBounded(t *testing.T) {
	var errs []string
	for i := range 100 {
		errs = append(errs, fmt.Sprintf("input/%d: %s", i, strings.Repeat("ü", 1000)))
	}
	got := boundedErrors(errs)
	if len(got) != v1.MaxValidationErrors || got[len(got)-1] != "and 37 more errors" {
		t.Fatalf("%d errors, the last %q", len(got), got[len(got)-1])
	}
	for _, e := range got {
		if len(e) > v1.MaxValidationErrorBytes || !utf8.ValidString(e) {
			t.Fatalf("an error of %d bytes (valid %t)", len(e), utf8.ValidString(e))
		}
	}
	if few := boundedErrors(errs[:2]); len(few) != 2 || !strings.HasSuffix(few[0], "…[cut]") {
		t.Fatalf("two long errors: %q", few)
	}
}
