package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed delivery. The signature is HMAC-SHA256, keyed with the
// channel's signing Secret, over "TIMESTAMP.BODY", TIMESTAMP the Unix seconds in
// HeaderTimestamp; HeaderSignature holds "v1=" and its hex. Signing the timestamp
// with the body lets a receiver refuse an old message played again (Verify).
const (
	HeaderTimestamp = "X-Toolgate-Timestamp"
	HeaderSignature = "X-Toolgate-Signature"
	signatureScheme = "v1="
)

// DefaultMaxAge is how old a signed message Verify accepts by default.
const DefaultMaxAge = 5 * time.Minute

// Sign is the HeaderSignature value for body sent at ts.
func Sign(key []byte, ts time.Time, body []byte) string {
	return signatureScheme + hex.EncodeToString(mac(key, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(key []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(ts))
	h.Write([]byte("."))
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a delivery for a receiver: timestamp and signature are the values
// of HeaderTimestamp and HeaderSignature. It refuses a signature that is not the
// key's over the timestamp and body, and a timestamp more than maxAge from now
// (either way: a clock ahead is no excuse), so that a recorded message cannot be
// played again later.
func Verify(key []byte, timestamp, signature string, body []byte, now time.Time, maxAge time.Duration) error {
	secs, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q is not Unix seconds", HeaderTimestamp, timestamp)
	}
	if age := now.Sub(time.Unix(secs, 0)); age > maxAge || age < -maxAge {
		return fmt.Errorf("%s is %s away from now, more than the %s allowed: an old message played again, or a clock off", HeaderTimestamp, age.Round(time.Second), maxAge)
	}
	hexSig, ok := strings.CutPrefix(signature, signatureScheme)
	if !ok {
		return fmt.Errorf("%s must start with %s", HeaderSignature, signatureScheme)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || !hmac.Equal(got, mac(key, timestamp, body)) {
		return fmt.Errorf("%s does not match the body: not signed with this key, or changed on the way", HeaderSignature)
	}
	return nil
}
