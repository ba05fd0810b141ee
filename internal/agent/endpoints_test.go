package agent

import (
	"strings"
	"testing"
)

func TestEndpointsAllow(t *testing.T) {
	list := MustParseEndpoints("https://api.openai.com/v1/, http://127.0.0.1:*, http://[::1]:8000, https://LLM.Example.com, https://proxy.example.com:8443/openai")
	for _, tc := range []struct {
		baseURL string
		allowed bool
	}{
		{"https://api.openai.com/v1", true},
		{"https://api.openai.com/v1/", true},
		{"https://API.OpenAI.com/v1", true},
		{"https://api.openai.com:443/v1", true},
		{"https://api.openai.com:0443/v1", true},
		{"https://api.openai.com/v1/chat", true},
		{"https://api.openai.com/v10", false},
		{"https://api.openai.com/", false},
		{"https://api.openai.com", false},
		{"https://api.openai.com/V1", false},
		{"http://api.openai.com/v1", false},
		{"https://api.openai.com:8443/v1", false},
		{"https://api.openai.com.evil.net/v1", false},
		{"https://evil.net/api.openai.com/v1", false},
		{"https://api.openai.com./v1", false},
		{"https://sk-key@api.openai.com/v1", false},
		{"https://user:hunter3@api.openai.com/v1", false},
		{"https://api.openai.com/v1?x=1", false},
		{"https://api.openai.com/v1?", false},
		{"https://api.openai.com/v1#frag", false},
		{"https://api.openai.com/v1/../admin", false},
		{"https://api.openai.com/v1/%2e%2e/admin", false},
		{"https://api.openai.com/v1/./chat", false},
		{"https://api.openai.com/v1%2F..%2Fadmin", false},
		{"ftp://api.openai.com/v1", false},
		{"api.openai.com/v1", false},
		{"//api.openai.com/v1", false},
		{"", false},
		{"http://127.0.0.1:41234/v1", true},
		{"http://127.0.0.1/v1", true},
		{"http://127.0.0.1.evil.net:41234/v1", false},
		{"https://127.0.0.1:41234/v1", false},
		{"http://127.0.0.2:41234/v1", false},
		{"http://[::1]:8000/v1", true},
		{"http://[0:0:0:0:0:0:0:1]:8000/v1", false},
		{"http://[::1]:8001/v1", false},
		{"http://[::1]/v1", false},
		{"https://llm.example.com", true},
		{"https://llm.example.com/anything/v1", true},
		{"https://proxy.example.com:8443/openai/v1", true},
		{"https://proxy.example.com:8443/openaiv1", false},
		{"https://proxy.example.com/openai/v1", false},
		{"http://127.0.0.1:/v1", false},
		{"http://127.0.0.1:99999/v1", false},
		{"http://127.0.0.1:*/v1", false},
	} {
		err := list.Allow(tc.baseURL)
		if (err == nil) != tc.allowed {
			t.Errorf("Allow(%q) = %v, want allowed=%v", tc.baseURL, err, tc.allowed)
		}
		if err != nil && (strings.Contains(err.Error(), "hunter3") || strings.Contains(err.Error(), "sk-key")) {
			t.Errorf("Allow(%q) repeats the userinfo: %v", tc.baseURL, err)
		}
	}
}

func TestEndpointsAllowMessages(t *testing.T) {
	list := MustParseEndpoints("https://api.openai.com/v1")
	for baseURL, want := range map[string]string{
		"https://user:secret@api.openai.com/v1": "userinfo",
		"https://evil.net/v1":                   "not on the controller's allow-list of model endpoints (https://api.openai.com/v1)",
		"https://api.openai.com/v1/../x":        `".." segment`,
		"https://api.openai.com/v1?k=1":         "query",
		"gopher://api.openai.com/v1":            "not http or https",
	} {
		err := list.Allow(baseURL)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Allow(%q) = %v, want it to say %q", baseURL, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Allow(%q) repeats the password: %v", baseURL, err)
		}
	}
}

func TestParseEndpoints(t *testing.T) {
	good, err := ParseEndpoints(DefaultEndpoints)
	if err != nil {
		t.Fatalf("DefaultEndpoints: %v", err)
	}
	if good.String() != DefaultEndpoints || good.IsZero() {
		t.Fatalf("String() = %q", good.String())
	}
	for list, want := range map[string]string{
		"":                                   "empty",
		" , ,":                               "empty",
		"https://user:pw@api.openai.com/v1":  "userinfo",
		"https://api.openai.com/v1?x=1":      "query",
		"api.openai.com":                     "absolute URL",
		"https://":                           "absolute URL",
		"https://api.openai.com:x/v1":        "not a URL",
		"https://api.openai.com:0":           "1 to 65535",
		"file:///etc/passwd":                 "absolute URL",
		"https://a.example.com,ftp://b.test": "not http or https",
		"https://*.example.com":              "no wildcards",
		"https://exa mple.com":               "not a URL",
	} {
		if _, err := ParseEndpoints(list); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEndpoints(%q) = %v, want it to say %q", list, err, want)
		}
	}
	if _, err := ParseEndpoints("https://u:hunter2@x.example.com"); err != nil && strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error repeats the password: %v", err)
	}
}
