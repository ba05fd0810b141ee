package notify

import (
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Retry bounds the attempts of one delivery.
type Retry struct {
	// Base is the wait after the first failed attempt; each next wait doubles.
	Base time.Duration
	// Cap is the longest wait.
	Cap time.Duration
	// MaxAttempts is how many attempts are made before delivery is given up.
	MaxAttempts int32
}

// DefaultRetry tries for about an hour: 5 s, 10 s, 20 s … up to 10 minutes apart,
// 12 attempts. A receiver down longer than that is a receiver to fix, and the
// channel's Delivering condition and the failure metric say so.
var DefaultRetry = Retry{Base: 5 * time.Second, Cap: 10 * time.Minute, MaxAttempts: 12}

// Wait is how long after attempt number attempts (1 for the first) the next is due.
func (r Retry) Wait(attempts int32) time.Duration {
	w := r.Base
	for i := int32(1); i < attempts && w < r.Cap; i++ {
		w *= 2
	}
	return min(w, r.Cap)
}

// Due says whether an attempt for rec (nil when none was made) is due at now, and
// if not, how long until it is; a delivered record, or one out of attempts, is
// never due again (wait 0).
func (r Retry) Due(rec *v1.NotificationRecord, now time.Time) (bool, time.Duration) {
	if rec == nil {
		return true, 0
	}
	if rec.DeliveredAt != nil || rec.Attempts >= r.MaxAttempts {
		return false, 0
	}
	if rec.LastAttemptAt == nil {
		return true, 0
	}
	next := rec.LastAttemptAt.Add(r.Wait(rec.Attempts))
	if !now.Before(next) {
		return true, 0
	}
	return false, next.Sub(now)
}
