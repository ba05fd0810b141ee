package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
)

// TokenHeader carries the token on a request the page's script makes.
const TokenHeader = "X-Toolgate-Token"

// maxBody bounds what a request's body may hold.
const maxBody = 64 << 10

// tokenField is the query parameter (reads) and form field (writes) that carry the
// token.
const tokenField = "token"

// NewToken returns a fresh random token: 32 bytes from crypto/rand, hex-encoded.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// allowedHosts are the Host (and Origin host) values the console answers to: the
// loopback address and the name localhost, with the port it listens on. Any other
// name that resolves to 127.0.0.1 is a DNS rebinding, and is refused.
func allowedHosts(port int) []string {
	p := strconv.Itoa(port)
	return []string{"127.0.0.1:" + p, "localhost:" + p}
}

// Refusal says why the console refuses r, or "" when r may pass. token is this
// launch's token, port the port the console listens on. The order of the checks
// does not matter for safety; each names what was wrong.
func Refusal(r *http.Request, token string, port int) string {
	hosts := allowedHosts(port)
	if !oneOf(r.Host, hosts) {
		return "the Host header " + strconv.Quote(r.Host) + " is not the console's address (" + hosts[0] + " or " + hosts[1] + "): open the URL kubectl toolgate console printed"
	}
	if origin := r.Header.Get("Origin"); origin != "" && !oneOf(origin, []string{"http://" + hosts[0], "http://" + hosts[1]}) {
		return "the request comes from another site (Origin " + strconv.Quote(origin) + "): the console takes requests from its own pages only"
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return "the request comes from another site (Sec-Fetch-Site: cross-site): the console takes requests from its own pages only"
	}
	got := r.Header.Get(TokenHeader)
	if got == "" {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			got = r.URL.Query().Get(tokenField)
		} else {
			// A write carries the token in its body (or the header), never in the URL
			// alone: the form the console's own page posts holds it.
			got = r.PostFormValue(tokenField)
		}
	}
	if got == "" {
		return "the request carries no console token: open the URL kubectl toolgate console printed, token included"
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		return "the console token is wrong: open the URL this launch of kubectl toolgate console printed (each launch makes a new token)"
	}
	return ""
}

func oneOf(s string, set []string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}

// gate puts Refusal in front of next, and sets the headers every answer carries:
// no caching, no framing (clickjacking), no referrer to another site (the URL
// holds the token; within the console a referrer is sent, else the browser's
// Origin on a form post would be "null"), only the console's own scripts. It never sets an Access-Control-* header: no other
// origin may read an answer.
func gate(token string, port int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		// A form is a comment and two words; nothing bigger is read.
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if why := Refusal(r, token, port); why != "" {
			http.Error(w, "refused: "+why, http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
			http.Error(w, "method "+r.Method+" is not served: the console answers GET and POST", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}
