package archive

import (
	"context"
	"fmt"
)

// Break is where a task's chain does not hold.
type Break struct {
	// Seq and Name are the record's where the chain breaks.
	Seq  int64
	Name string
	// Problem says what does not hold, for a person.
	Problem string
}

func (b *Break) Error() string {
	return fmt.Sprintf("the chain breaks at record %d (%s): %s", b.Seq, b.Name, b.Problem)
}

// verifyPage is how many records Verify reads at a time.
const verifyPage = 500

// Verify walks the task's records in the order they were stored and recomputes each
// one's hash from its content and the record before it. It returns the first place
// the chain breaks (a record whose content changed, one removed from the middle, one
// put in), nil when the whole chain holds, and how many records it checked.
func (a *Archive) Verify(ctx context.Context, taskUID string) (*Break, int, error) {
	prev, checked := "", 0
	var after int64
	for {
		page, err := a.TaskRecords(ctx, taskUID, after, verifyPage)
		if err != nil {
			return nil, checked, err
		}
		for _, r := range page.Records {
			if b := checkLink(r, prev); b != nil {
				return b, checked, nil
			}
			prev, checked = r.SHA256, checked+1
		}
		if page.Next == 0 {
			return nil, checked, nil
		}
		after = page.Next
	}
}

// checkLink checks one record against the hash of the record before it.
func checkLink(r Record, prev string) *Break {
	if r.PrevSHA256 != prev {
		return &Break{Seq: r.Seq, Name: r.Name, Problem: fmt.Sprintf("it follows a record hashed %s, but the record before it is hashed %s: a record before it was removed, changed or put in", short(r.PrevSHA256), short(prev))}
	}
	if got := Hash(r); got != r.SHA256 {
		return &Break{Seq: r.Seq, Name: r.Name, Problem: fmt.Sprintf("its content hashes to %s, not to the %s it was stored with: it was changed after it was stored", short(got), short(r.SHA256))}
	}
	return nil
}

func short(h string) string {
	if h == "" {
		return "(none: the first record)"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
