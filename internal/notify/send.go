package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Target is where one channel's messages go, its Secrets read.
type Target struct {
	Type v1.NotificationChannelType
	// URL is the webhook's address: a credential, never put in an error.
	URL string
	// SigningKey signs CloudEvents deliveries.
	SigningKey []byte
}

// ParseURL checks a webhook URL read from a Secret, saying what is wrong without
// repeating it (it is a credential).
func ParseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("the URL does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("the URL's scheme is %q; it must be http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("the URL names no host")
	}
	return nil
}

// Body is what Post sends for m to a target of type t, with its content type.
func Body(t v1.NotificationChannelType, m Message, now time.Time) ([]byte, string, error) {
	if t == v1.ChannelCloudEvents {
		b, err := CloudEventJSON(m, now)
		return b, CloudEventContentType, err
	}
	b, err := Slack(m)
	return b, "application/json", err
}

// Post sends m to t once. Any 2xx answer is a delivery; anything else is an error
// saying the receiver's status, never the URL.
func Post(ctx context.Context, hc *http.Client, t Target, m Message, now time.Time) error {
	body, contentType, err := Body(t.Type, m, now)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("the URL does not make a request")
	}
	req.Header.Set("Content-Type", contentType)
	if t.Type == v1.ChannelCloudEvents {
		req.Header.Set(HeaderTimestamp, fmt.Sprint(now.Unix()))
		req.Header.Set(HeaderSignature, Sign(t.SigningKey, now, body))
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL
		}
		return fmt.Errorf("sending: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	// The answer's body is not read into the error: the error is shown on the
	// channel, and a channel's author could aim it at a service inside the cluster
	// to read what that answers.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}
