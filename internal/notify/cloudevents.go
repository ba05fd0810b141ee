package notify

import (
	"encoding/json"
	"strings"
	"time"
)

// CloudEventTypePrefix prefixes the type of every event: the type of a Requested
// approval is dev.toolgate.approval.requested.
const CloudEventTypePrefix = "dev.toolgate.approval."

// CloudEventContentType is the content type of a structured CloudEvent.
const CloudEventContentType = "application/cloudevents+json"

// CloudEvent is a CloudEvents 1.0 event in structured mode, its data the Message.
type CloudEvent struct {
	SpecVersion     string  `json:"specversion"`
	ID              string  `json:"id"`
	Source          string  `json:"source"`
	Type            string  `json:"type"`
	Subject         string  `json:"subject"`
	Time            string  `json:"time"`
	DataContentType string  `json:"datacontenttype"`
	Data            Message `json:"data"`
}

// EventID is the id of the event announcing m: the Approval's UID and the event,
// the same on every attempt and every controller, so that a receiver can drop a
// repeated delivery by id, as the CloudEvents spec intends.
func EventID(m Message) string { return m.UID + "." + strings.ToLower(string(m.Event)) }

// CloudEventJSON is m as a structured CloudEvent: source names the namespace's
// approvals, subject the Approval, and time is when it was built.
func CloudEventJSON(m Message, now time.Time) ([]byte, error) {
	return json.Marshal(CloudEvent{
		SpecVersion:     "1.0",
		ID:              EventID(m),
		Source:          "/apis/toolgate.dev/v1alpha1/namespaces/" + m.Namespace + "/approvals",
		Type:            CloudEventTypePrefix + strings.ToLower(string(m.Event)),
		Subject:         m.Approval,
		Time:            now.UTC().Format(time.RFC3339),
		DataContentType: "application/json",
		Data:            m,
	})
}
