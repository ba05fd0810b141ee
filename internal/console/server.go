package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

//go:embed templates static
var files embed.FS

// pages are the console's templates, each parsed with the layout.
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{"diffLines": diffLines}
	out := map[string]*template.Template{}
	for _, page := range []string{"index.html", "approval.html", "tasks.html", "task.html", "error.html"} {
		out[page] = template.Must(template.New(page).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/pending.html", "templates/"+page))
	}
	return out
}()

// Server is one launch of the console: its listener on the loopback interface, its
// token, and the pages.
type Server struct {
	backend Backend
	token   string
	ln      net.Listener
	port    int
	// subscribers are the open event streams, told when an approval changed.
	mu          sync.Mutex
	subscribers map[chan struct{}]struct{}
}

// New listens on 127.0.0.1:port (0 picks a free port) with a new token. The
// console never listens on another interface: a remote page or person cannot reach
// it, whatever the token.
func New(b Backend, port int) (*Server, error) {
	token, err := NewToken()
	if err != nil {
		return nil, fmt.Errorf("making the console's token: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:%d: %w (pick another --port, or 0 for any free one)", port, err)
	}
	return &Server{backend: b, token: token, ln: ln, port: ln.Addr().(*net.TCPAddr).Port, subscribers: map[chan struct{}]struct{}{}}, nil
}

// Addr is the address the console listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Token is this launch's token.
func (s *Server) Token() string { return s.token }

// URL is the console's first page, token included: what the user opens.
func (s *Server) URL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/?%s=%s", s.port, tokenField, s.token)
}

// Serve answers requests and follows the approvals until ctx ends, then closes the
// listener and every open page's event stream.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = s.backend.WatchApprovals(ctx, s.notify)
	}()
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Requests end with ctx: an open event stream does not hold the server up.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
	}()
	err := srv.Serve(s.ln)
	cancel()
	<-watched
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler is the console's routes behind its gate.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /approvals/{namespace}/{name}", s.approval)
	mux.HandleFunc("POST /approvals/{namespace}/{name}", s.decide)
	mux.HandleFunc("GET /tasks", s.tasks)
	mux.HandleFunc("GET /tasks/{namespace}/{name}", s.task)
	return gate(s.token, s.port, mux)
}

// view is what every page's template gets.
type view struct {
	Token string
	Title string
	// Pending, Approval, Tasks, Task: what the page shows.
	Pending  []ApprovalRow
	Approval *ApprovalPage
	Tasks    []TaskRow
	Task     *TaskPage
	// Notice says what a decision recorded; Refusal why it was not recorded, word
	// for word.
	Notice, Refusal string
	Error           string
}

func (s *Server) render(w http.ResponseWriter, status int, page string, v view) {
	v.Token = s.token
	var b bytes.Buffer
	if err := pages[page].ExecuteTemplate(&b, "layout", v); err != nil {
		http.Error(w, "rendering "+page+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	s.render(w, http.StatusBadGateway, "error.html", view{Title: "Error", Error: err.Error()})
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	rows, err := s.backend.Pending(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, http.StatusOK, "index.html", view{Title: "Pending approvals", Pending: rows})
}

func (s *Server) approval(w http.ResponseWriter, r *http.Request) {
	s.showApproval(w, r, view{})
}

func (s *Server) showApproval(w http.ResponseWriter, r *http.Request, v view) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	page, err := s.backend.Approval(r.Context(), ns, name)
	if err != nil {
		s.fail(w, err)
		return
	}
	v.Title, v.Approval = "Approval "+ns+"/"+name, &page
	status := http.StatusOK
	if v.Refusal != "" {
		status = http.StatusConflict
	}
	s.render(w, status, "approval.html", v)
}

// decide records the decision the form carries, then shows the approval again with
// what was recorded or, word for word, why not.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	var approve bool
	switch d := r.PostFormValue("decision"); d {
	case "approve":
		approve = true
	case "deny":
	default:
		http.Error(w, fmt.Sprintf("the form's decision is %q: it must be approve or deny", d), http.StatusBadRequest)
		return
	}
	msg, err := s.backend.Decide(r.Context(), r.PathValue("namespace"), r.PathValue("name"), r.PostFormValue("shown"), approve, r.PostFormValue("comment"))
	if err != nil {
		s.showApproval(w, r, view{Refusal: err.Error()})
		return
	}
	s.showApproval(w, r, view{Notice: msg})
}

func (s *Server) tasks(w http.ResponseWriter, r *http.Request) {
	rows, err := s.backend.Tasks(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, http.StatusOK, "tasks.html", view{Title: "Tasks", Tasks: rows})
}

func (s *Server) task(w http.ResponseWriter, r *http.Request) {
	page, err := s.backend.Task(r.Context(), r.PathValue("namespace"), r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, http.StatusOK, "task.html", view{Title: "Task " + page.Namespace + "/" + page.Name, Task: &page})
}

// events streams the pending approvals (Server-Sent Events), rendered as the index
// page renders them, once at the start and again after every change.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "this connection cannot stream events", http.StatusInternalServerError)
		return
	}
	changed := s.subscribe()
	defer s.unsubscribe(changed)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for {
		if err := s.sendPending(r.Context(), w); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

// sendPending writes one "pending" event: the pending list's HTML, or the error
// that kept it from being read.
func (s *Server) sendPending(ctx context.Context, w http.ResponseWriter) error {
	var b bytes.Buffer
	rows, err := s.backend.Pending(ctx)
	if err != nil {
		b.WriteString(template.HTMLEscapeString(err.Error()))
	} else if err := pages["index.html"].ExecuteTemplate(&b, "pending", view{Token: s.token, Pending: rows}); err != nil {
		return err
	}
	var ev strings.Builder
	ev.WriteString("event: pending\n")
	for _, line := range strings.Split(b.String(), "\n") {
		ev.WriteString("data: " + line + "\n")
	}
	ev.WriteString("\n")
	_, err = w.Write([]byte(ev.String()))
	return err
}

func (s *Server) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subscribers[ch] = struct{}{}
	s.mu.Unlock()
	return ch
}

func (s *Server) unsubscribe(ch chan struct{}) {
	s.mu.Lock()
	delete(s.subscribers, ch)
	s.mu.Unlock()
}

// notify tells every open stream that an approval changed. A stream that has not
// yet sent the last change needs no second word: it reads the list afresh.
func (s *Server) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subscribers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// diffLine is one line of a diff with the class that colours it.
type diffLine struct{ Class, Text string }

// diffLines splits a diff into lines classed by their first character.
func diffLines(diff string) []diffLine {
	var out []diffLine
	for _, line := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		class := ""
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"), strings.HasPrefix(line, "diff "):
			class = "meta"
		case strings.HasPrefix(line, "+"):
			class = "add"
		case strings.HasPrefix(line, "-"):
			class = "del"
		case strings.HasPrefix(line, "@@"):
			class = "hunk"
		}
		out = append(out, diffLine{Class: class, Text: line})
	}
	return out
}
