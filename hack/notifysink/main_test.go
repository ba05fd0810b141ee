package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/notify"
)

// The sink keeps a signed delivery as verified and refuses a forged one.
func TestSinkVerifies(t *testing.T) {
	now := time.Unix(1700000000, 0)
	s := &sink{key: []byte("k"), now: func() time.Time { return now }}
	body, _ := notify.CloudEventJSON(notify.Message{Event: "Requested", UID: "u", Approval: "a", Namespace: "n"}, now)
	post := func(key string, body []byte) int {
		req := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
		req.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(notify.HeaderSignature, notify.Sign([]byte(key), now, body))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code
	}
	if code := post("k", body); code != http.StatusNoContent {
		t.Fatalf("signed delivery answered %d", code)
	}
	if code := post("forged", body); code != http.StatusUnauthorized {
		t.Fatalf("forged delivery answered %d", code)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/messages", nil))
	var got []received
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got) != 2 {
		t.Fatalf("messages %s: %v", w.Body, err)
	}
	if !got[0].Verified || got[0].Type != "dev.toolgate.approval.requested" || got[0].ID != "u.requested" || got[1].Verified || got[1].Error == "" {
		t.Fatalf("messages %+v", got)
	}
}
