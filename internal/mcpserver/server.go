// Package mcpserver serves one Model Context Protocol endpoint per AgentTask with an
// external agent, so that any MCP client's tool calls are governed by toolgate: each
// tools/call becomes a ToolIntent created as the caller, and the result is its
// observation.
//
// The caller presents a Kubernetes bearer token. The server authenticates it with a
// TokenReview and then talks to the API server with that same token, never with its
// own credentials: the intent is created by the caller, so admission sets and checks
// spec.requestedBy, the task's proposers decide who may propose, and the caller's
// RBAC decides what it may read. The server's own identity is used only for the
// TokenReview and for reading the cluster's service-account issuer keys, which tell
// the cluster's own tokens from junk before a new token spends the budget of
// reviews (issuer.go, sources.go).
package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/clip"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/pipeline"
)

// The endpoint authenticates its callers' bearer tokens.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

const (
	// Path is the endpoint's route: the task's namespace and name.
	Path = "/mcp/{namespace}/{task}"
	// WaitTool is the tool that picks up the observation of a call that outlasted
	// its request.
	WaitTool = "toolgate_wait"
	// Provider is spec.proposedBy.provider of the intents the endpoint creates.
	Provider = "mcp"
	// DefaultMaxWait is how long a tools/call waits for its observation: under the
	// 60 seconds MCP clients commonly give a request (the TypeScript SDK's default),
	// so that a call waiting for a human returns "still waiting" (picked up with
	// toolgate_wait) before the client gives up and cancels it.
	DefaultMaxWait = 50 * time.Second
	// sessionTimeout closes a session idle this long, with what it holds.
	sessionTimeout = 30 * time.Minute
	// DefaultHeartbeat is how often a waiting call sends a progress notification
	// even when nothing changed, so that clients that reset their request timeout
	// on progress keep waiting for a human.
	DefaultHeartbeat = 10 * time.Second
	// DefaultReviewTTL is how long a token's review is reused; rejectedTTL is how
	// long a token the API server refused is refused without asking it again.
	DefaultReviewTTL, rejectedTTL = 30 * time.Second, 10 * time.Second
	// knownTTL is how long a token the API server accepted stays known: its next
	// reviews are not held to the rate of new tokens, so that a flood of junk
	// cannot lock out the callers already in.
	knownTTL = time.Hour
	// DefaultReviewRate bounds the TokenReviews of tokens the endpoint does not
	// know and that the cluster's issuer did not sign (a second), with a burst of
	// reviewBurst: clients that send a new junk token with every request cost the
	// API server no more than that. Each source address has a share of it
	// (sources.go).
	DefaultReviewRate = 20
	reviewBurst       = 50
)

// Server is the MCP endpoint of every AgentTask.
type Server struct {
	// Config is the API server's address and CA; each caller's requests carry the
	// caller's own token instead of its credentials.
	Config *rest.Config
	// Reviews authenticates tokens (the server's own identity: create tokenreviews).
	Reviews authenticationclient.TokenReviewInterface
	// Discovery reads the cluster's service-account issuer and keys (the server's
	// own identity; every service account may). Nil recognizes no token as the
	// cluster's: every new token goes by its source's budget.
	Discovery rest.Interface
	Scheme    *runtime.Scheme
	// MaxWait bounds how long a tools/call waits; Heartbeat is the progress interval.
	MaxWait, Heartbeat time.Duration
	// ReviewRate bounds the TokenReviews a second of tokens not known; ReviewTTL
	// is how long a review is reused.
	ReviewRate rate.Limit
	ReviewTTL  time.Duration
	Log        logr.Logger

	mu       sync.Mutex
	callers  map[[32]byte]*caller
	rejected map[[32]byte]time.Time
	reviews  *rate.Limiter
	sources  *sourceBuckets
	issuer   *clusterIssuer
}

// errSourceBusy and errBusy refuse a token the endpoint may not review now: too
// many new tokens from its source address, or from all of them (sources.go).
var (
	errSourceBusy = errors.New("too many new tokens from this address at once; try again in a second (a service-account token of this cluster is not held to this limit)")
	errBusy       = errors.New("too many new tokens are being presented at once; try again in a second (a service-account token of this cluster is not held to this limit)")
)

// caller is an authenticated token: who it is, and a client that acts as it. Its
// review is used until expires; the token stays known until known.
type caller struct {
	user           string
	groups         []string
	client         client.WithWatch
	expires, known time.Time
}

// taskKey carries the task requireProposer read for the request to serverFor.
type taskKey struct{}

// Handler serves Path.
func (s *Server) Handler() http.Handler {
	if s.MaxWait <= 0 {
		s.MaxWait = DefaultMaxWait
	}
	if s.Heartbeat <= 0 {
		s.Heartbeat = DefaultHeartbeat
	}
	if s.ReviewRate <= 0 {
		s.ReviewRate = DefaultReviewRate
	}
	if s.ReviewTTL <= 0 {
		s.ReviewTTL = DefaultReviewTTL
	}
	s.reviews = rate.NewLimiter(s.ReviewRate, reviewBurst)
	s.sources = newSourceBuckets(s.ReviewRate, reviewBurst)
	s.issuer = &clusterIssuer{discovery: s.Discovery, log: s.Log}
	mcpHandler := mcp.NewStreamableHTTPHandler(s.serverFor, &mcp.StreamableHTTPOptions{
		// Behind a Service, the Host header is the Service's, not localhost.
		DisableLocalhostProtection: true,
		SessionTimeout:             sessionTimeout,
	})
	mux := http.NewServeMux()
	// authenticate refuses a request without a valid token with a JSON-RPC error
	// that names why (clients show it); RequireBearerToken then hands the verified
	// token to the SDK, which binds each session to the user who opened it.
	bearer := auth.RequireBearerToken(s.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	mux.Handle(Path, s.authenticate(bearer(s.requireProposer(mcpHandler))))
	return mux
}

// authenticate checks the request's bearer token before anything else reads it.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fields := strings.Fields(r.Header.Get("Authorization"))
		if len(fields) != 2 || !strings.EqualFold(fields[0], "bearer") {
			refuse(w, r, http.StatusUnauthorized, "no bearer token: send Authorization: Bearer TOKEN with a Kubernetes token of one of the task's proposers (for a service account: kubectl create token NAME)")
			return
		}
		if _, err := s.callerOf(r.Context(), fields[1], sourceOf(r)); err != nil {
			status := http.StatusUnauthorized
			if errors.Is(err, errBusy) || errors.Is(err, errSourceBusy) {
				status = http.StatusTooManyRequests
				w.Header().Set("Retry-After", "1")
			}
			refuse(w, r, status, err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// verify authenticates a bearer token with a TokenReview.
func (s *Server) verify(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
	c, err := s.callerOf(ctx, token, sourceOf(r))
	if err != nil {
		return nil, err
	}
	return &auth.TokenInfo{UserID: c.user, Expiration: c.expires, Extra: map[string]any{"token": token}}, nil
}

// errRejected is the refusal of a token the API server does not accept.
var errRejected = fmt.Errorf("%w: the bearer token is not valid for this cluster; present a service-account token (kubectl create token NAME) or any token the API server accepts", auth.ErrInvalidToken)

// callerOf is the caller a token authenticates as: from the cache while its review
// is fresh, else from a new TokenReview. source is the address the token came
// from, whose budget a new token spends.
func (s *Server) callerOf(ctx context.Context, token string, source netip.Prefix) (*caller, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	s.mu.Lock()
	c, cached := s.callers[key]
	if cached && now.Before(c.expires) {
		s.mu.Unlock()
		return c, nil
	}
	known := cached && now.Before(c.known)
	if until, ok := s.rejected[key]; ok && now.Before(until) {
		s.mu.Unlock()
		metrics.MCPTokenReviews.WithLabelValues("RejectedCached").Inc()
		return nil, errRejected
	}
	s.mu.Unlock()
	if !known {
		if err := s.mayReview(ctx, token, source, now); err != nil {
			metrics.MCPTokenReviews.WithLabelValues("Limited").Inc()
			return nil, err
		}
	}
	review, err := s.Reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		// The detail (the manager's identity, the API server's address) is for the
		// log, not for whoever sent the token.
		s.Log.Error(err, "reviewing an MCP caller's token")
		metrics.MCPTokenReviews.WithLabelValues("Error").Inc()
		return nil, errors.New("the token could not be reviewed now; try again")
	}
	if !review.Status.Authenticated {
		s.Log.V(1).Info("refused an MCP caller's token", "error", review.Status.Error)
		metrics.MCPTokenReviews.WithLabelValues("Rejected").Inc()
		s.remember(func() {
			if s.rejected == nil {
				s.rejected = map[[32]byte]time.Time{}
			}
			s.rejected[key] = time.Now().Add(rejectedTTL)
			delete(s.callers, key)
		})
		return nil, errRejected
	}
	metrics.MCPTokenReviews.WithLabelValues("Authenticated").Inc()
	cfg := rest.AnonymousClientConfig(s.Config)
	cfg.BearerToken = token
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: s.Scheme})
	if err != nil {
		return nil, err
	}
	c = &caller{user: review.Status.User.Username, groups: review.Status.User.Groups, client: cl, expires: time.Now().Add(s.ReviewTTL), known: time.Now().Add(knownTTL)}
	s.remember(func() {
		if s.callers == nil {
			s.callers = map[[32]byte]*caller{}
		}
		s.callers[key] = c
		delete(s.rejected, key)
	})
	return c, nil
}

// mayReview says why a token the endpoint does not know may not be reviewed now,
// or nil: a token the cluster's issuer signed may always be (issuer.go), another
// within its source's budget and then the endpoint's (sources.go).
func (s *Server) mayReview(ctx context.Context, token string, source netip.Prefix, now time.Time) error {
	switch {
	case s.issuer.signed(ctx, token, now):
		return nil
	case !s.sources.allow(source, now):
		return errSourceBusy
	case !s.reviews.AllowN(now, 1):
		return errBusy
	}
	return nil
}

// remember records a review under the lock, first dropping the expired ones: the
// refused tokens of the last rejectedTTL, which the rate limit bounds, and the
// tokens the API server accepted in the last knownTTL, which only a caller with
// credentials adds to.
func (s *Server) remember(record func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for k, c := range s.callers {
		if now.After(c.known) {
			delete(s.callers, k)
		}
	}
	for k, until := range s.rejected {
		if now.After(until) {
			delete(s.rejected, k)
		}
	}
	record()
}

// requireProposer lets a request through only when the task exists, has an
// external agent, and names the caller as a proposer; each refusal says why. It is
// checked on every request, so a proposer removed from the task is refused at once.
func (s *Server) requireProposer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := auth.TokenInfoFromContext(r.Context())
		token, _ := info.Extra["token"].(string)
		c, err := s.callerOf(r.Context(), token, sourceOf(r))
		if err != nil {
			refuse(w, r, http.StatusUnauthorized, err.Error())
			return
		}
		ns, name := r.PathValue("namespace"), r.PathValue("task")
		if id := r.Header.Get(sessionHeader); id != "" && !strings.HasSuffix(id, "-"+endpointTag(ns, name)) {
			refuse(w, r, http.StatusNotFound, fmt.Sprintf("session %q was not opened at this endpoint (AgentTask %s/%s): a session serves the task it was opened for; open a new one here", clip.Bytes(id, 64), ns, name))
			return
		}
		task := &v1.AgentTask{}
		err = c.client.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, task)
		switch {
		case apierrors.IsNotFound(err):
			refuse(w, r, http.StatusNotFound, fmt.Sprintf("AgentTask %s/%s does not exist", ns, name))
			return
		case apierrors.IsForbidden(err):
			refuse(w, r, http.StatusForbidden, fmt.Sprintf("%s may not read AgentTask %s/%s (%v); a proposer needs get on agenttasks, as the toolgate agent role gives", c.user, ns, name, err))
			return
		case err != nil:
			refuse(w, r, http.StatusBadGateway, fmt.Sprintf("reading AgentTask %s/%s: %v", ns, name, err))
			return
		}
		if problem := proposerProblem(task, c.user, c.groups); problem != "" {
			refuse(w, r, http.StatusForbidden, problem)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), taskKey{}, task)))
	})
}

// sessionHeader carries the session id of every request after initialize.
const sessionHeader = "Mcp-Session-Id"

// endpointTag ends the id of each session opened at the endpoint of AgentTask
// ns/task.
func endpointTag(ns, task string) string {
	sum := sha256.Sum256([]byte(ns + "/" + task))
	return hex.EncodeToString(sum[:8])
}

// proposerProblem says why user may not propose into task over MCP, or "".
func proposerProblem(task *v1.AgentTask, user string, groups []string) string {
	ext := task.Spec.Agent.External
	if ext == nil {
		return fmt.Sprintf("AgentTask %s/%s has a model agent (spec.agent.model): only toolgate's agent loop proposes its calls, so it has no MCP endpoint; point the MCP client at a task with agent.external", task.Namespace, task.Name)
	}
	if !pipeline.IsProposer(ext.Proposers, user, pipeline.ClaimedGroups(task, groups)) {
		return fmt.Sprintf("%s may not propose calls for AgentTask %s/%s; its proposers are %s (the task's owner adds you to spec.agent.external.proposers)", user, task.Namespace, task.Name, pipeline.ProposersText(ext.Proposers))
	}
	return ""
}

// refuse answers a request that never reaches MCP with a JSON-RPC error, so that a
// client shows the reason.
func refuse(w http.ResponseWriter, r *http.Request, status int, message string) {
	// The error answers the request's own id, so that a client pairs it with its
	// request and shows the message.
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	if r.Body != nil {
		data, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(data, &req)
	}
	id := any(req.ID)
	if len(req.ID) == 0 || string(req.ID) == "null" {
		id = "toolgate"
	}
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": -32001, "message": "toolgate: " + message},
	})
}

// callerFrom is the caller of the token the request carried. The SDK runs tool
// handlers with the context of the request that opened the session, so the caller
// is read from the request's own token (verified by authenticate on this request),
// never from the context: a session outlives its first token. That token is known
// (authenticate reviewed it), so no source's budget is spent: the source is not
// read.
func (s *Server) callerFrom(ctx context.Context, extra *mcp.RequestExtra) (*caller, error) {
	if extra == nil || extra.TokenInfo == nil {
		return nil, errors.New("the request carries no bearer token")
	}
	token, _ := extra.TokenInfo.Extra["token"].(string)
	return s.callerOf(ctx, token, netip.Prefix{})
}

// Runnable serves the endpoint on Addr until its context ends. It is a
// controller-runtime Runnable that runs on every replica, leader or not: the
// endpoint only reads and creates objects as its callers.
type Runnable struct {
	Addr   string
	Server *Server
}

// NeedLeaderElection is false: every replica serves.
func (r Runnable) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then lets the calls in flight finish for a moment.
func (r Runnable) Start(ctx context.Context) error {
	srv := &http.Server{Addr: r.Addr, Handler: r.Server.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe() }()
	select {
	case err := <-done:
		return fmt.Errorf("the MCP endpoint on %s: %w", r.Addr, err)
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}
