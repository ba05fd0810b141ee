package mask

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// ordinaryOutputs are outputs of everyday tool calls that hold no secret: hashes,
// UUIDs, base64 test data, long identifiers, stack traces, tables. The generated
// ones are derived from fixed seeds, so the corpus is the same in every run.
func ordinaryOutputs() []string {
	sum1 := func(s string) string { h := sha1.Sum([]byte(s)); return hex.EncodeToString(h[:]) }
	sum256 := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	uuid := func(s string) string {
		h := sha256.Sum256([]byte(s))
		h[6] = h[6]&0x0f | 0x40
		h[8] = h[8]&0x3f | 0x80
		x := hex.EncodeToString(h[:16])
		return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
	}
	b64 := func(s string, n int) string {
		var b []byte
		for i := 0; len(b) < n; i++ {
			h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", s, i)))
			b = append(b, h[:]...)
		}
		return base64.StdEncoding.EncodeToString(b[:n])
	}
	integrity := func(s string) string {
		h := sha512.Sum512([]byte(s))
		return "sha512-" + base64.StdEncoding.EncodeToString(h[:])
	}

	var out []string
	// git
	for i := range 10 {
		var b strings.Builder
		for j := range 5 {
			fmt.Fprintf(&b, "%s fix(controller): requeue on conflict #%d\n", sum1(fmt.Sprint(i, j))[:7], 100*i+j)
		}
		out = append(out, b.String())
		out = append(out, fmt.Sprintf("commit %s\nAuthor: Dana Developer <dana@example.com>\nDate:   Mon Dec 7 15:0%d:00 2026 +0000\n\n    mask: keep the name, mask the value\n", sum1(fmt.Sprint("c", i)), i))
	}
	out = append(out, sum1("HEAD")+"\n", "Merge: "+sum1("a")[:7]+" "+sum1("b")[:7]+"\n")
	// checksums and digests
	for i := range 10 {
		out = append(out, fmt.Sprintf("%s  toolgate_%d.%d.0_linux_amd64.tar.gz\n%s  toolgate_%d.%d.0_darwin_arm64.tar.gz\n", sum256(fmt.Sprint("l", i)), i/3, i, sum256(fmt.Sprint("d", i)), i/3, i))
		out = append(out, fmt.Sprintf("ghcr.io/toolgate/runner@sha256:%s\n", sum256(fmt.Sprint("img", i))))
		out = append(out, fmt.Sprintf("github.com/example/lib%d v1.%d.0 h1:%s\ngithub.com/example/lib%d v1.%d.0/go.mod h1:%s\n", i, i, b64(fmt.Sprint("gosum", i), 32), i, i, b64(fmt.Sprint("gomod", i), 32)))
		out = append(out, fmt.Sprintf(`    "node_modules/pkg-%d": {
      "version": "2.%d.1",
      "resolved": "https://registry.npmjs.org/pkg-%d/-/pkg-%d-2.%d.1.tgz",
      "integrity": "%s",
      "dev": true
    },
`, i, i, i, i, i, integrity(fmt.Sprint("npm", i))))
	}
	// UUIDs
	for i := range 10 {
		out = append(out, fmt.Sprintf("metadata:\n  name: web-%d\n  namespace: default\n  uid: %s\n  resourceVersion: \"%d\"\n", i, uuid(fmt.Sprint("uid", i)), 48213+i))
		out = append(out, fmt.Sprintf(`{"id":"%s","requestId":"%s","status":"ok","items":%d}`+"\n", uuid(fmt.Sprint("id", i)), uuid(fmt.Sprint("req", i)), i))
	}
	// base64 test data
	for i := range 10 {
		out = append(out, fmt.Sprintf("var fixture%d = []byte(%q)\n", i, b64(fmt.Sprint("fx", i), 48+i*16)))
		out = append(out, fmt.Sprintf("echo %s | base64 -d > testdata/blob%d.bin\n", b64(fmt.Sprint("blob", i), 30), i))
	}
	out = append(out, "data:image/png;base64,"+b64("png", 300)+"\n")
	out = append(out, "-----BEGIN CERTIFICATE-----\n"+wrap(b64("cert", 600), 64)+"-----END CERTIFICATE-----\n")
	out = append(out, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"+b64("ssh", 32)[:43]+" dana@laptop\n")
	// long identifiers
	out = append(out,
		"--- FAIL: TestReconcileRequeuesWhenTheApprovalWasSupersededByANewerFingerprintInTheSameNamespace (0.02s)\n",
		"internal/controller/toolintent_controller.go:412:2: undefined: reconcileApprovalSettlementAfterFingerprintRecheck\n",
		"com.example.payments.gateway.internal.AuthorizationTokenRefreshSchedulerConfigurationProperties\n",
		"AbstractSingletonProxyFactoryBeanDefinitionRegistryPostProcessorAdapterImpl.java:88\n",
		"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured.(*UnstructuredList).EachListItemWithAlloc\n",
	)
	// stack traces
	out = append(out, `panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x12c4a5f]

goroutine 214 [running]:
github.com/toolgate/toolgate/internal/executor.(*Runner).tokenize(0xc000a12000, {0xc0004b2a80, 0x3e})
	/workspace/internal/executor/runner.go:318 +0x1f
github.com/toolgate/toolgate/internal/executor.(*Runner).Run(0xc000a12000, {0x1f3c8e0, 0xc000128000})
	/workspace/internal/executor/runner.go:142 +0x2b4
created by sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).Start.func2.2 in goroutine 98
	/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.23.1/pkg/internal/controller/controller.go:223 +0x4d0
`,
		`Traceback (most recent call last):
  File "/app/auth/session.py", line 88, in refresh
    token = self._client.fetch_token(url=TOKEN_URL, client_id=self.client_id)
  File "/usr/lib/python3.12/site-packages/requests_oauthlib/oauth2_session.py", line 366, in fetch_token
    self._client.parse_request_body_response(r.text, scope=self.scope)
oauthlib.oauth2.rfc6749.errors.InvalidGrantError: (invalid_grant) token expired
`,
		`Exception in thread "main" java.lang.IllegalStateException: keystore not loaded
	at com.example.security.KeyStoreLoader.load(KeyStoreLoader.java:57)
	at com.example.Main.main(Main.java:21)
`)
	// tables and tool output
	out = append(out, `NAME                                READY   STATUS      RESTARTS   AGE
toolgate-controller-7d9f8b6c5-x2k4p   1/1     Running     0          3d4h
runner-4f8a2c-job-9xk2z               0/1     Completed   0          12m
web-6b7d9c8f4d-qq8lm                  2/2     Running     1 (2d ago) 5d
`,
		`NAME                  TYPE                                  DATA   AGE
default-token-x7k2p   kubernetes.io/service-account-token   3      41d
registry-credentials  kubernetes.io/dockerconfigjson        1      12d
tls-web               kubernetes.io/tls                     2      90d
`,
		`apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  LOG_LEVEL: debug
  FEATURE_FLAGS: "search,export"
  CACHE_TTL: "300"
`,
		`total 48
drwxr-xr-x  7 dana staff   224 Dec  7 15:01 .
-rw-r--r--  1 dana staff  1187 Dec  7 14:58 go.mod
-rw-r--r--  1 dana staff 48213 Dec  7 14:58 go.sum
-rw-------  1 dana staff   411 Dec  7 14:12 token_cache.json
`,
		`Filesystem      Size  Used Avail Use% Mounted on
overlay          98G   41G   53G  44% /
tmpfs            64M     0   64M   0% /dev
`,
		"ok  \tgithub.com/toolgate/toolgate/internal/mask\t0.412s\nok  \tgithub.com/toolgate/toolgate/internal/policy\t1.208s\n",
		"PASS\ncoverage: 83.4% of statements\n",
		`diff --git a/internal/auth/token.go b/internal/auth/token.go
index 3b18e51..a7c2d4f 100644
--- a/internal/auth/token.go
+++ b/internal/auth/token.go
@@ -12,7 +12,7 @@ func bearer(r *http.Request) string {
-	token := r.Header.Get("Authorization")
+	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
 	return token
`,
		"Step 7/12 : RUN go build -trimpath -ldflags=\"-s -w\" -o /out/manager ./cmd\n ---> Running in 4b1f2e9c7a3d\n",
		"Successfully built 4b1f2e9c7a3d\nSuccessfully tagged ghcr.io/toolgate/manager:v0.9.0\n",
		"Terraform will perform the following actions:\n  # aws_s3_bucket.logs will be created\n  + arn = \"arn:aws:s3:::toolgate-logs-eu-west-1\"\n",
		"2026-12-07T15:02:11.482Z\tINFO\tcontroller\treconciled\t{\"toolintent\": {\"name\":\"ti-7f3c9a\",\"namespace\":\"team-a\"}, \"took\": \"12.4ms\"}\n",
		"the tokenizer split the input into 412 tokens; keyboard layout us; the secretary's password-reset form is at /help\n",
		"PWD=/home/runner/work/toolgate\nOLDPWD=/home/runner\nHOME=/home/runner\nSHELL=/bin/bash\n",
		"error: token expired, password reset needed\n",
		"spec.urlSecretRef: Secret team-a/url not found, or not labelled toolgate.dev/notification-credentials=true\n",
		"--set auth.enabled=true --set tls.required=false\n",
		"Your branch is up to date with 'origin/main'.\nnothing to commit, working tree clean\n",
	)
	return out
}

// wrap breaks s into lines of n characters.
func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\n")
		s = s[n:]
	}
	b.WriteString(s + "\n")
	return b.String()
}

// TestOrdinaryOutputsAreMostlyLeftAlone: of a corpus of everyday outputs that
// hold no secret, at most 1 in 50 has anything masked.
func TestOrdinaryOutputsAreMostlyLeftAlone(t *testing.T) {
	corpus := ordinaryOutputs()
	if len(corpus) < 100 {
		t.Fatalf("the corpus has %d outputs; it needs at least 100", len(corpus))
	}
	masked := 0
	for _, s := range corpus {
		out, found := Find(s)
		if out != s {
			masked++
			t.Logf("masked (%v): %q -> %q", found, s, out)
		}
	}
	t.Logf("%d of %d ordinary outputs masked", masked, len(corpus))
	if masked*50 > len(corpus) {
		t.Errorf("%d of %d ordinary outputs were masked; at most 1 in 50 may be", masked, len(corpus))
	}
}
