package gitws

import (
	"strings"
	"testing"
)

func TestParseRemote(t *testing.T) {
	for raw, want := range map[string]Remote{
		"https://github.com/a/b.git":       {Scheme: "https", Host: "github.com", Port: 443},
		"http://git/calc.git":              {Scheme: "http", Host: "git", Port: 80},
		"http://10.0.0.1:8080/r.git":       {Scheme: "http", Host: "10.0.0.1", Port: 8080},
		"ssh://git@example.com:2222/r.git": {Scheme: "ssh", Host: "example.com", Port: 2222},
		"git@github.com:a/b.git":           {Scheme: "ssh", Host: "github.com", Port: 22},
		"git://example.com/r.git":          {Scheme: "git", Host: "example.com", Port: 9418},
	} {
		got, err := ParseRemote(raw)
		want.URL = raw
		if err != nil || got != want {
			t.Errorf("ParseRemote(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	// Each is refused, and says why.
	for raw, why := range map[string]string{
		"file:///etc":                      `scheme "file"`,
		"/srv/repo.git":                    `scheme ""`,
		"ext::sh -c touch% /tmp/x":         "",
		"https://u:p@example.com/r.git":    "carries a password",
		"https://example.com/r.git?x=1":    "has a query",
		"ssh://-oProxyCommand=x/r":         "no usable host",
		"github.com:\\/../../../srv/x.git": "is read as file",
		"host:2222:repo":                   "network fence",
		" https://example.com/r.git":       "surrounding space",
	} {
		_, err := ParseRemote(raw)
		if err == nil || KindOf(err) != FailureURLInvalid || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseRemote(%q): %v, want a URLInvalid saying %q", raw, err, why)
		}
	}
}
