// Package console is the local web console of `kubectl toolgate console`: a small
// HTTP server on the loopback interface that shows pending approvals (live), an
// approval's full request, and tasks with their timelines, and that approves or denies
// as the person who started it.
//
// The console holds no credentials and makes no decision of its own. Everything it
// shows and does goes through a Backend, which the kubectl plugin implements with the
// user's kubeconfig and the same renderers its commands print with; the page never
// sees the credentials. What this package owns is the web side and its gate:
//
//   - a random token, made per launch, on every request (query or header for a read,
//     header or form field for a write: never a cookie, so a cross-site form cannot
//     carry it);
//   - the Host header must name the loopback address and port the server listens on
//     (no DNS rebinding), and an Origin header, when sent, must be the console's own
//     (no cross-site request);
//   - it listens on 127.0.0.1 only and sends no CORS headers.
//
// The gate's decision is the pure function Refusal; Handler puts it in front of
// every route.
package console
