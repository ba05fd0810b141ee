package mask

import "testing"

func TestSecretsExact(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		literals []string
		want     string
	}{
		{
			name: "no secret is left as is",
			in:   "model gpt-4o not found; max tokens 4096",
			want: "model gpt-4o not found; max tokens 4096",
		},
		{
			name: "bearer token in a header dump",
			in:   "Authorization: Bearer abc.def-123",
			want: "Authorization: [MASKED]",
		},
		{
			name: "bearer token in prose",
			in:   "sent bearer eyJhbGciOi.payload.sig to the server",
			want: "sent bearer [MASKED] to the server",
		},
		{
			name: "sk key",
			in:   "Incorrect API key provided: sk-proj-AbCdEf0123456789xyz.",
			want: "Incorrect API key provided: [MASKED].",
		},
		{
			name: "sk key the provider starred",
			in:   "Incorrect API key provided: sk-proj-************xyz1.",
			want: "Incorrect API key provided: [MASKED].",
		},
		{
			name: "api key in a query string",
			in:   `Post "https://llm.example/v1/chat/completions?api-key=s3cr3t&x=1": EOF`,
			want: `Post "https://llm.example/v1/chat/completions?api-key=[MASKED]&x=1": EOF`,
		},
		{
			name: "key and token in query strings",
			in:   "GET /v1?api_key=AAA&access_token=BBB",
			want: "GET /v1?api_key=[MASKED]&access_token=[MASKED]",
		},
		{
			name: "json field",
			in:   `{"apiKey": "hunter22"}`,
			want: `{"apiKey": "[MASKED]"}`,
		},
		{
			name: "x-api-key header",
			in:   "x-api-key: abcdef",
			want: "x-api-key: [MASKED]",
		},
		{
			name:     "configured literal of any shape",
			in:       "key local-dev-key-42 rejected",
			literals: []string{"local-dev-key-42"},
			want:     "key [MASKED] rejected",
		},
		{
			name:     "configured literal url-encoded",
			in:       "url ?k=a%2Bb%2Fc",
			literals: []string{"a+b/c"},
			want:     "url ?k=[MASKED]",
		},
		{
			name:     "empty literal masks nothing",
			in:       "plain text",
			literals: []string{""},
			want:     "plain text",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Secrets(tt.in, tt.literals...); got != tt.want {
				t.Errorf("Secrets(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
