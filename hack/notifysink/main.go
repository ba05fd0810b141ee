// Command notifysink is a CloudEvents webhook receiver for the demo and the e2e
// suite: it checks each delivery's HMAC-SHA256 signature with the key in
// $NOTIFY_SINK_KEY (notify.Verify), answers 204 to a signed one and 401 to any
// other, and keeps the last deliveries, which GET /messages returns as JSON. It
// runs in the git server's image (make images).
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/notify"
)

// kept bounds what the sink remembers.
const kept = 100

// received is one delivery as GET /messages shows it.
type received struct {
	At       time.Time       `json:"at"`
	Verified bool            `json:"verified"`
	Error    string          `json:"error,omitempty"`
	Type     string          `json:"type,omitempty"`
	ID       string          `json:"id,omitempty"`
	Event    json.RawMessage `json:"event,omitempty"`
}

type sink struct {
	key []byte
	now func() time.Time
	mu  sync.Mutex
	got []received
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthz":
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/messages" && r.Method == http.MethodGet:
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(append([]received{}, s.got...))
	case r.Method == http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec := received{At: s.now().UTC()}
		if err := notify.Verify(s.key, r.Header.Get(notify.HeaderTimestamp), r.Header.Get(notify.HeaderSignature), body, s.now(), notify.DefaultMaxAge); err != nil {
			rec.Error = err.Error()
		} else {
			var ce notify.CloudEvent
			if err := json.Unmarshal(body, &ce); err != nil {
				rec.Error = "signed, but not a CloudEvent: " + err.Error()
			} else {
				rec.Verified, rec.Type, rec.ID, rec.Event = true, ce.Type, ce.ID, body
			}
		}
		s.mu.Lock()
		s.got = append(s.got, rec)
		if len(s.got) > kept {
			s.got = s.got[len(s.got)-kept:]
		}
		s.mu.Unlock()
		if !rec.Verified {
			http.Error(w, rec.Error, http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func main() {
	addr := flag.String("addr", ":8080", "address to listen on")
	flag.Parse()
	key := os.Getenv("NOTIFY_SINK_KEY")
	if key == "" {
		log.Fatal("NOTIFY_SINK_KEY must hold the channel's signing key")
	}
	srv := &http.Server{Addr: *addr, Handler: &sink{key: []byte(key), now: time.Now}, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
