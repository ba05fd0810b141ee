package mask

import (
	"strings"
	"testing"
)

func TestSecrets(t *testing.T) {
	cases := []struct {
		name, in string
		gone     []string // must not survive
		kept     []string // must survive
	}{
		{"bearer header", "curl -H 'Authorization: Bearer abcdefghijklmnop' https://x", []string{"abcdefghijklmnop"}, []string{"curl", "https://x"}},
		{"bare bearer", "sent bearer abcdefghijkl123 to server", []string{"abcdefghijkl123"}, []string{"to server"}},
		{"query token", "GET https://api.example.com/v1?access_token=s3cr3tvalue&page=2", []string{"s3cr3tvalue"}, []string{"page=2"}},
		{"query sig", "https://bucket.example.com/o?X-Amz-Signature=deadbeefcafe&X-Amz-Date=1", []string{"deadbeefcafe"}, []string{"X-Amz-Date=1"}},
		{"env assignment", "export GITHUB_TOKEN=abc123def456 && make", []string{"abc123def456"}, []string{"make"}},
		{"json password", `{"user":"bob","password":"hunter22"}`, []string{"hunter22"}, []string{`"user":"bob"`}},
		{"flag api key", "tool --api-key zzzzyyyyxxxx run", []string{"zzzzyyyyxxxx"}, []string{"run"}},
		{"a flag's value is on its line", "sa-absent\nno-token\nroot-read-only\n", nil, []string{"no-token\nroot-read-only\n"}},
		{"openai key", "key is sk-proj-ABCDEFGH12345678", []string{"ABCDEFGH12345678"}, []string{"key is"}},
		{"aws key", "AKIAABCDEFGHIJKLMNOP in config", []string{"AKIAABCDEFGHIJKLMNOP"}, []string{"in config"}},
		{"github token", "ghp_0123456789abcdefghijABCDEFGHIJ", []string{"ghp_0123456789abcdefghij"}, nil},
		{"url userinfo", "git clone https://bob:pa55word@git.example.com/r.git", []string{"pa55word"}, []string{"bob", "git.example.com/r.git"}},
		{"private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", []string{"MIIEow"}, nil},
		{"jwt", "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.SflKxwRJSMeKKF2QT4fw", []string{"SflKxwRJSMeKKF2QT4fw"}, nil},
		{"prose about tokens untouched", "error: token expired, password reset needed", nil, []string{"token expired, password reset needed"}},
		{"plain text untouched", "npm test -- --watch=false", nil, []string{"npm test -- --watch=false"}},
		{"go test output untouched", "ok  \tgithub.com/x/y\t0.01s", nil, []string{"ok  \tgithub.com/x/y\t0.01s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := Secrets(tc.in)
			for _, g := range tc.gone {
				if strings.Contains(out, g) {
					t.Errorf("secret %q survived: %q", g, out)
				}
			}
			for _, k := range tc.kept {
				if !strings.Contains(out, k) {
					t.Errorf("ordinary text %q was lost: %q", k, out)
				}
			}
			if len(tc.gone) > 0 && !strings.Contains(out, Masked) {
				t.Errorf("no mask marker in %q", out)
			}
		})
	}
}

func TestSecretsLiterals(t *testing.T) {
	out := Secrets("the key q9+z/w== was sent as q9%2Bz%2Fw%3D%3D", "q9+z/w==")
	if strings.Contains(out, "q9") {
		t.Fatalf("literal survived: %q", out)
	}
	if got := Secrets("abc", "ab"); got != "abc" {
		t.Fatalf("short literal must not mangle text: %q", got)
	}
}
