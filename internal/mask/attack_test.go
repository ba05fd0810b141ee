package mask

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// Fake secrets in the shapes gitleaks' rules know.
const (
	fakeGitHubPAT = "ghp_R8mX2vQ9kLp4TzW7nB3cY6hJ1dF5sA0eGuVo"
	fakeAWSKey    = "AKIALALEMEL33243OLIB"
	fakeSlackBot  = "xoxb-263594206564-2343594206574-FGqddMF8t08v8N7Oq4i57vs1"
)

// survivors returns the pieces of secret, eight bytes or longer, that are still in
// out: a masked secret leaves none.
func survivors(out, secret string) []string {
	var left []string
	for i := 0; i+8 <= len(secret); i++ {
		if strings.Contains(out, secret[i:i+8]) {
			left = append(left, secret[i:i+8])
		}
	}
	return left
}

// TestAttacksOnTheMask: text shaped to slip a secret past a detector that reads
// it as written.
func TestAttacksOnTheMask(t *testing.T) {
	if len(fakeGitHubPAT) != 40 {
		t.Fatalf("the fake PAT is %d characters, GitHub's are 40", len(fakeGitHubPAT))
	}
	pem := "-----BEGIN RSA PRIVATE KEY-----\n" + wrap(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("not a real key, only its shape; ", 8))), 64) + "-----END RSA PRIVATE KEY-----"
	pemBody := strings.Split(pem, "\n")[1]
	long := strings.Repeat("x", 100_000)
	cases := []struct {
		name, in string
		secrets  []string // none of them may survive, in any piece of eight bytes
		kept     []string // ordinary text that must survive
	}{
		{
			name:    "a token wrapped at the terminal's width",
			in:      "$ cat .env\nGITHUB_TOKEN=" + fakeGitHubPAT[:21] + "\n" + fakeGitHubPAT[21:] + "\n$ ",
			secrets: []string{fakeGitHubPAT},
			kept:    []string{"$ cat .env", "GITHUB_TOKEN="},
		},
		{
			name:    "a token wrapped over three lines by base64 -w",
			in:      "token:\n  " + fakeSlackBot[:20] + "\n  " + fakeSlackBot[20:40] + "\n  " + fakeSlackBot[40:] + "\nend\n",
			secrets: []string{fakeSlackBot},
			kept:    []string{"token:", "end"},
		},
		{
			name:    "a private key over many lines",
			in:      "$ cat id_rsa\n" + pem + "\n$ ",
			secrets: []string{pemBody},
			kept:    []string{"$ cat id_rsa"},
		},
		{
			name:    "a private key inside a JSON string, its newlines escaped",
			in:      `{"output":"` + strings.ReplaceAll(pem, "\n", `\n`) + `","exitCode":0}`,
			secrets: []string{pemBody},
			kept:    []string{`"exitCode":0`},
		},
		{
			name:    "a token inside JSON with escaped quotes",
			in:      `{"stdout":"export GITHUB_TOKEN=\"` + fakeGitHubPAT + `\"\n"}`,
			secrets: []string{fakeGitHubPAT},
			kept:    []string{`{"stdout":"export GITHUB_TOKEN=\"`},
		},
		{
			name:    "a password in JSON inside a call's JSON input, its quotes escaped",
			in:      `{"command":"echo {\"user\":\"bob\",\"password\":\"hunter22\"} > creds.json"}`,
			secrets: []string{"hunter22"},
			kept:    []string{`\"user\":\"bob\"`, "creds.json"},
		},
		{
			name:    "curl's user and password at the end of a call's JSON input",
			in:      `{"command":"curl -k https://infinispan:11222/rest \\\n  -u developer:yqDVtkqPECriaLRi"}`,
			secrets: []string{"yqDVtkqPECriaLRi"},
			kept:    []string{"curl -k https://infinispan:11222/rest"},
		},
		{
			name:    "a token written with JSON unicode escapes",
			in:      `{"token":"\u0067\u0068\u0070\u005f` + fakeGitHubPAT[4:] + `"}`,
			secrets: []string{fakeGitHubPAT[4:]},
		},
		{
			name:    "a token base64-encoded in ordinary output",
			in:      "$ echo $CREDS | base64\n" + base64.StdEncoding.EncodeToString([]byte("aws_access_key_id="+fakeAWSKey)) + "\n",
			secrets: []string{base64.StdEncoding.EncodeToString([]byte("aws_access_key_id=" + fakeAWSKey))[8:]},
			kept:    []string{"$ echo $CREDS | base64"},
		},
		{
			name:    "ANSI colour in the middle of a key",
			in:      "found: \x1b[1;31m" + fakeAWSKey[:9] + "\x1b[0m" + fakeAWSKey[9:] + " in config\n",
			secrets: []string{fakeAWSKey[:9], fakeAWSKey[9:]},
			kept:    []string{"found: ", " in config"},
		},
		{
			name:    "a zero-width space in the middle of a token",
			in:      "token " + fakeGitHubPAT[:12] + "\u200b" + fakeGitHubPAT[12:] + "\n",
			secrets: []string{fakeGitHubPAT[:12], fakeGitHubPAT[12:]},
		},
		{
			name:    "a very long line with a key far into it",
			in:      long[:70_000] + " " + fakeAWSKey + " " + long[70_000:],
			secrets: []string{fakeAWSKey},
		},
		{
			name:    "a very long line with a key across a window's edge",
			in:      long[:segmentBytes-10] + " " + fakeAWSKey + " " + long[segmentBytes:],
			secrets: []string{fakeAWSKey},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, found := Find(tc.in)
			for _, s := range tc.secrets {
				if left := survivors(out, s); len(left) > 0 {
					t.Errorf("pieces of the secret survived: %q\nout: %q", left, cut(out))
				}
			}
			for _, k := range tc.kept {
				if !strings.Contains(out, k) {
					t.Errorf("ordinary text %q was lost: %q", k, cut(out))
				}
			}
			if len(found) == 0 {
				t.Errorf("Find named no rule for %q", cut(out))
			}
		})
	}
}

// cut shortens a long text for a failure message.
func cut(s string) string {
	if len(s) <= 400 {
		return s
	}
	return s[:200] + fmt.Sprintf("…(%d bytes)…", len(s)-400) + s[len(s)-200:]
}

const secretYAML = `apiVersion: v1
items:
- apiVersion: v1
  data:
    password: aHVudGVyMg==
    tls.key: |
      LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJna3Foa2lHOXcwQkFRRUZB
      QVNDQktjd2dnU2pBZ0VBQW9JQkFRQzd
    username: YWRtaW4=
  kind: Secret
  metadata:
    creationTimestamp: "2026-12-01T10:00:00Z"
    name: db-credentials
    namespace: team-a
    resourceVersion: "48213"
    uid: 3f2a9c1e-7b4d-4e8a-9c2f-3d5e6f7a8b9c
  type: Opaque
- apiVersion: v1
  kind: Secret
  metadata:
    name: api
  stringData:
    API_KEY: plain-but-secret
  type: Opaque
kind: List
metadata:
  resourceVersion: ""
`

const secretJSON = `{
    "apiVersion": "v1",
    "data": {
        "password": "aHVudGVyMg==",
        "username": "YWRtaW4="
    },
    "kind": "Secret",
    "metadata": {
        "name": "db-credentials",
        "namespace": "team-a"
    },
    "type": "Opaque"
}
`

// TestKubernetesSecretDataIsMasked: kubectl get secret -o yaml (and -o json)
// comes out with every data value masked, whatever it decodes to, and the keys,
// the kind and the metadata visible.
func TestKubernetesSecretDataIsMasked(t *testing.T) {
	cases := []struct {
		name, in string
		values   []string
		kept     []string
	}{
		{
			name:   "yaml list",
			in:     secretYAML,
			values: []string{"aHVudGVyMg==", "LS0tLS1CRUdJTiBQUklWQVRF", "QVNDQktjd2dnU2pBZ0VBQW9JQkFRQzd", "YWRtaW4=", "plain-but-secret"},
			kept:   []string{"password: ", "tls.key: |", "username: ", "kind: Secret", "name: db-credentials", "uid: 3f2a9c1e-7b4d-4e8a-9c2f-3d5e6f7a8b9c", "API_KEY: ", "type: Opaque"},
		},
		{
			name:   "json",
			in:     secretJSON,
			values: []string{"aHVudGVyMg==", "YWRtaW4="},
			kept:   []string{`"password": "`, `"username": "`, `"kind": "Secret"`, `"name": "db-credentials"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, found := Find(tc.in)
			for _, v := range tc.values {
				if strings.Contains(out, v) {
					t.Errorf("data value %q survived:\n%s", v, out)
				}
			}
			for _, k := range tc.kept {
				if !strings.Contains(out, k) {
					t.Errorf("%q was lost:\n%s", k, out)
				}
			}
			if !contains(found, "kubernetes-secret-data") {
				t.Errorf("found %v, want kubernetes-secret-data among them", found)
			}
		})
	}
	// A ConfigMap's data is no secret.
	configMap := strings.NewReplacer(`"kind": "Secret"`, `"kind": "ConfigMap"`, `"password"`, `"greeting"`).Replace(secretJSON)
	if out := Secrets(configMap); strings.Contains(out, Masked) {
		t.Errorf("a ConfigMap's data was masked:\n%s", out)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestFindNamesTheRules: Find says which rules found what it masked, each once,
// and masking what it returned changes nothing.
func TestFindNamesTheRules(t *testing.T) {
	pem := "-----BEGIN RSA PRIVATE KEY-----\n" + wrap(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("not a real key, only its shape; ", 8))), 64) + "-----END RSA PRIVATE KEY-----\n"
	in := "aws_access_key_id = " + fakeAWSKey + "\nagain " + fakeAWSKey + "\n" + pem
	out, found := Find(in)
	for _, want := range []string{"aws-access-token", "private-key"} {
		if !contains(found, want) {
			t.Errorf("found %v, want %s among them", found, want)
		}
	}
	if got := Count(out); got != 3 {
		t.Errorf("Count = %d, want 3 (the key twice, the private key once): %q", got, out)
	}
	if again, foundAgain := Find(out); again != out {
		t.Errorf("masking a masked text changed it (found %v):\n%q\n%q", foundAgain, out, again)
	}
	if got, want := Redacted(2, []string{"aws-access-token", "private-key"}), "2 secrets redacted (aws-access-token, private-key)"; got != want {
		t.Errorf("Redacted = %q, want %q", got, want)
	}
	if got := Redacted(0, nil); got != "" {
		t.Errorf("Redacted(0) = %q, want nothing", got)
	}
}

// TestTheMarkerTellsNothingOfTheSecret: two secrets of different kinds, lengths
// and prefixes are masked with the same marker.
func TestTheMarkerTellsNothingOfTheSecret(t *testing.T) {
	for _, in := range []string{"key " + fakeAWSKey, "key " + fakeGitHubPAT, "key sk-proj-AbCdEf0123456789xyz0123456789", "key " + fakeSlackBot} {
		if got := Secrets(in); got != "key "+Masked {
			t.Errorf("Secrets(%q) = %q, want %q", in, got, "key "+Masked)
		}
	}
}

// TestMaskingConcurrently: the detector is built once, on first use, and masks
// from many goroutines at once with the same result (run with -race).
func TestMaskingConcurrently(t *testing.T) {
	in := "aws_access_key_id = " + fakeAWSKey + "\n" + secretYAML
	want := Secrets(in)
	results := make(chan string, 8)
	for range 8 {
		go func() { results <- Secrets(in) }()
	}
	for range 8 {
		if got := <-results; got != want {
			t.Errorf("masking concurrently gave %q, want %q", got, want)
		}
	}
}
