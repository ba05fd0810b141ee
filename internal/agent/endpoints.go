package agent

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// DefaultEndpoints is the allow-list a controller gets when it is given none: OpenAI,
// and any port of the controller's own loopback interface (a model server or proxy
// on the same machine or in the same pod, such as Ollama or llama.cpp in development).
// A production install names exactly its endpoints.
const DefaultEndpoints = "https://api.openai.com/v1,http://127.0.0.1:*,http://localhost:*,http://[::1]:*"

// Endpoints is an allow-list of model endpoints. The controller sends a task's API
// key only to a baseURL it allows: without it, anyone who may create an AgentTask
// could send the namespace's model credentials (and what the model is told) to a
// host of their choosing.
//
// An entry is scheme://host[:port][/path]. A baseURL is allowed by an entry when
//   - the schemes are equal (http and https are different endpoints),
//   - the hosts are equal, ignoring case; there are no wildcards in hosts, so
//     https://api.openai.com does not allow https://api.openai.com.evil.net,
//   - the ports are equal, a missing port being the scheme's (80 or 443), or the
//     entry's port is * (any port: test and development servers pick theirs),
//   - and the entry's path, without a trailing slash, is the baseURL's path or a
//     prefix of it that ends at a "/": /v1 allows /v1 and /v1/, not /v10.
//
// Neither an entry nor a baseURL may carry userinfo (user:password@), a query or a
// fragment; a baseURL's path may not contain "." or ".." segments, which a server
// may resolve out of the allowed prefix.
type Endpoints struct {
	entries []endpoint
	text    []string
}

type endpoint struct {
	scheme, host, port, path string
}

// ParseEndpoints reads a comma-separated allow-list (spaces around entries are
// ignored). It refuses an empty list and any entry that is not of the form above.
func ParseEndpoints(list string) (Endpoints, error) {
	var e Endpoints
	for i, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		ep, err := parseEndpoint(raw, true)
		if err != nil {
			// The entry is named without its userinfo, which may be a password.
			name := fmt.Sprintf("number %d", i+1)
			if u, perr := url.Parse(raw); perr == nil && u.User == nil {
				name = fmt.Sprintf("%q", raw)
			}
			return Endpoints{}, fmt.Errorf("model endpoint %s: %w", name, err)
		}
		e.entries = append(e.entries, ep)
		e.text = append(e.text, raw)
	}
	if len(e.entries) == 0 {
		return Endpoints{}, errors.New("the model endpoint allow-list is empty: name at least one endpoint, for example https://api.openai.com/v1")
	}
	return e, nil
}

// MustParseEndpoints is ParseEndpoints for lists known to be valid; it panics
// otherwise.
func MustParseEndpoints(list string) Endpoints {
	e, err := ParseEndpoints(list)
	if err != nil {
		panic(err)
	}
	return e
}

// String is the list as given, entries separated by commas.
func (e Endpoints) String() string { return strings.Join(e.text, ",") }

// IsZero reports whether the list has no entry (the zero Endpoints).
func (e Endpoints) IsZero() bool { return len(e.entries) == 0 }

// Allow returns nil when baseURL is allowed, and otherwise why not.
func (e Endpoints) Allow(baseURL string) error {
	ep, err := parseEndpoint(baseURL, false)
	if err != nil {
		return err
	}
	for _, a := range e.entries {
		if a.scheme == ep.scheme && a.host == ep.host && (a.port == "*" || a.port == ep.port) && pathWithin(ep.path, a.path) {
			return nil
		}
	}
	return fmt.Errorf("it is not on the controller's allow-list of model endpoints (%s)", e)
}

// pathWithin reports whether p is prefix or below it, at a segment boundary.
func pathWithin(p, prefix string) bool {
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

// parseEndpoint normalises an allow-list entry (entry) or a task's baseURL.
func parseEndpoint(raw string, entry bool) (endpoint, error) {
	// url.Parse refuses the port "*", so an entry's wildcard port is taken out first.
	anyPort := false
	if entry {
		if scheme, rest, ok := strings.Cut(raw, "://"); ok {
			authority, path, _ := strings.Cut(rest, "/")
			if host, ok := strings.CutSuffix(authority, ":*"); ok {
				anyPort = true
				raw = scheme + "://" + host
				if path != "" || strings.Contains(rest, "/") {
					raw += "/" + path
				}
			}
		}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		// url.Error repeats the input, which may hold a password: say only what is wrong.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return endpoint{}, fmt.Errorf("not a URL: %v", err)
	case u.Opaque != "" || u.Host == "":
		return endpoint{}, errors.New("not an absolute URL with a host: write scheme://host[:port][/path]")
	case u.User != nil:
		return endpoint{}, errors.New("it carries userinfo (user:password@): put credentials in the API key Secret, never in the URL")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
		return endpoint{}, errors.New("it carries a query or fragment: name the API root only")
	}
	ep := endpoint{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname()), port: u.Port()}
	switch ep.scheme {
	case "http":
		if ep.port == "" {
			ep.port = "80"
		}
	case "https":
		if ep.port == "" {
			ep.port = "443"
		}
	default:
		return endpoint{}, fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if ep.host == "" {
		return endpoint{}, errors.New("it has no host")
	}
	if strings.Trim(ep.host, "abcdefghijklmnopqrstuvwxyz0123456789.-:") != "" {
		return endpoint{}, fmt.Errorf("host %q is not a DNS name or an IP address (hosts have no wildcards: name each one)", ep.host)
	}
	if strings.HasSuffix(u.Host, ":") {
		return endpoint{}, errors.New("it has an empty port")
	}
	n, err := strconv.Atoi(ep.port)
	if err != nil || n < 1 || n > 65535 {
		return endpoint{}, fmt.Errorf("port %q is not a number from 1 to 65535", ep.port)
	}
	// 0443 and 443 are one port.
	ep.port = strconv.Itoa(n)
	if anyPort {
		ep.port = "*"
	}
	ep.path = strings.TrimRight(u.EscapedPath(), "/")
	for _, seg := range strings.Split(ep.path, "/") {
		if seg == "." || seg == ".." || strings.EqualFold(seg, "%2e") || strings.EqualFold(seg, "%2e%2e") ||
			strings.EqualFold(seg, ".%2e") || strings.EqualFold(seg, "%2e.") {
			return endpoint{}, errors.New(`its path has a "." or ".." segment`)
		}
	}
	return ep, nil
}

// RedactURL is raw without its userinfo, for messages.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "[MASKED]" + raw[i:]
	}
	return raw
}
