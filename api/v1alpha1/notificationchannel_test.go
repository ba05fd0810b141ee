package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// The API server refuses a CloudEvents channel without a signing key (its receivers
// could not tell its messages from forged ones) and a console address that is not
// a web address, saying what to write.
func TestNotificationChannelValidation(t *testing.T) {
	ns := env.Namespace(t)
	channel := func(name string, mutate func(*v1.NotificationChannelSpec)) *v1.NotificationChannel {
		ch := &v1.NotificationChannel{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.NotificationChannelSpec{
				Type: v1.ChannelCloudEvents, URLSecretRef: v1.SecretKeyReference{Name: "hook", Key: "url"},
				SigningSecretRef: &v1.SecretKeyReference{Name: "hook", Key: "hmac"},
			},
		}
		mutate(&ch.Spec)
		return ch
	}
	if err := env.Client.Create(t.Context(), channel("ok", func(*v1.NotificationChannelSpec) {})); err != nil {
		t.Fatalf("a valid channel is refused: %v", err)
	}
	if err := env.Client.Create(t.Context(), channel("slack", func(s *v1.NotificationChannelSpec) {
		s.Type, s.SigningSecretRef, s.ConsoleURL = v1.ChannelSlack, nil, "https://console.example.com"
	})); err != nil {
		t.Fatalf("a Slack channel without a signing key is refused: %v", err)
	}
	requireInvalid(t, env.Client.Create(t.Context(), channel("unsigned", func(s *v1.NotificationChannelSpec) { s.SigningSecretRef = nil })),
		"spec.signingSecretRef is required with type CloudEvents")
	requireInvalid(t, env.Client.Create(t.Context(), channel("console", func(s *v1.NotificationChannelSpec) { s.ConsoleURL = "javascript:alert(1)" })),
		"spec.consoleURL must be an http or https address")
	requireInvalid(t, env.Client.Create(t.Context(), channel("event", func(s *v1.NotificationChannelSpec) { s.Events = []v1.NotificationEvent{"Consumed"} })),
		"Unsupported value")
}
