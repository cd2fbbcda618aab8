package fakeupstream

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Options control how the fake upstream answers. The zero value is usable.
type Options struct {
	// Latency is the delay before the response headers (for a JSON answer:
	// before the whole body). It applies to every API request, errors
	// included.
	Latency time.Duration
	// ChunkInterval is the delay before each content chunk of a stream
	// (0 = none).
	ChunkInterval time.Duration
	// CompletionMin and CompletionMax bound the number of completion tokens,
	// drawn uniformly in [CompletionMin, CompletionMax] and then capped by
	// the request's max_completion_tokens / max_tokens. Both zero means 20
	// and 200.
	CompletionMin int
	CompletionMax int
	// NoUsage: never report usage (JSON usage omitted, no usage chunk,
	// Anthropic usage omitted), to test the gateway's fallback counting.
	NoUsage bool
	// Seed seeds the generator of completion lengths. New and SetOptions
	// restart the sequence.
	Seed int64
	// CountTokens counts the prompt tokens of one piece of text. Default:
	// (len(text)+3)/4.
	CountTokens func(model, text string) int
	// Status, if non-zero, answers every API request with this status and
	// an OpenAI-style error body (for 5xx / 429 tests).
	Status int
	// MaxRecords, if positive, keeps only the most recent MaxRecords
	// records (for long benchmarks and demos). 0 keeps all.
	MaxRecords int
	// Limits are the provider's own true limits (rate, tokens,
	// concurrency, per model), enforced like a real provider: a request
	// without room is answered 429 and counted as a breach (see Stats).
	// The zero value means no limits. Requests answered with Status, and
	// invalid ones (unknown path, not a POST, body not a JSON object), are
	// not subject to the limits and charge nothing.
	Limits ProviderLimits
}

// Record is what the server saw of one API request and what it answered.
type Record struct {
	Received time.Time `json:"received"`
	// RequestID is the request's x-request-id header, if any.
	RequestID string    `json:"request_id,omitempty"`
	Finished  time.Time `json:"finished"` // zero while the request is in flight
	Path      string    `json:"path"`
	Model     string    `json:"model"`
	// User is the body's "user" field (OpenAI) or metadata.user_id
	// (Anthropic).
	User string `json:"user"`
	// APIKey is the bearer token or the x-api-key header the server saw.
	APIKey           string `json:"api_key"`
	AnthropicVersion string `json:"anthropic_version"`
	Stream           bool   `json:"stream"`
	// IncludeUsage: the body had stream_options.include_usage=true.
	IncludeUsage bool `json:"include_usage"`
	// Status is the HTTP status the server answered with.
	Status int `json:"status"`
	// PromptTokens and CompletionTokens are what was (or, with NoUsage,
	// would have been) reported. For an aborted stream CompletionTokens is
	// the number of tokens written before the abort.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// Aborted: the stream was cut before its end, because the client went
	// away mid-stream (or the server was closed).
	Aborted bool `json:"aborted"`
	// TokenCharge is what the request counts against the token limits:
	// the prompt estimate plus max_completion_tokens / max_tokens (see the
	// package documentation). It is set for every request subject to the
	// limits (even with none set), and charged only if it was admitted.
	TokenCharge int64 `json:"token_charge"`
	// RateLimited: the request was refused by the provider limits (answered
	// 429 and counted as a breach).
	RateLimited bool `json:"rate_limited"`
	// LimitedBy lists the limits that had no room for a refused request,
	// comma-separated, upstream-wide ones first: "requests", "tokens",
	// "concurrency", "model:requests", "model:tokens", "model:concurrency".
	LimitedBy string `json:"limited_by,omitempty"`
	// Body is a copy of the raw request body as received.
	Body []byte `json:"-"`
}

// Server is a fake LLM upstream. Create it with New; serve it with Start or
// mount Handler in a fasthttp.Server of your own.
type Server struct {
	opts atomic.Pointer[Options]

	rngMu sync.Mutex
	rng   *rand.Rand

	recMu   sync.Mutex
	records []*Record

	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	ids         atomic.Uint64

	lim *limiter

	mu       sync.Mutex // guards closed, streams.Add, srv, ln, serveErr
	closed   bool
	closing  chan struct{} // closed by Close: wakes sleeping handlers and streams
	streams  sync.WaitGroup
	srv      *fasthttp.Server
	ln       net.Listener
	serveErr chan error
	connsMu  sync.Mutex // guards conns
	conns    map[net.Conn]struct{}
	connWG   sync.WaitGroup
}

// New returns a server with the given options.
func New(opts Options) *Server {
	s := &Server{closing: make(chan struct{}), lim: newLimiter()}
	s.SetOptions(opts)
	return s
}

// SetOptions changes the server's behaviour at run time. It is safe to call
// concurrently with requests; a request uses the options current at its
// arrival. It restarts the completion-length sequence from opts.Seed.
//
// New limits apply at once to the charges already in the window and to the
// requests in flight (lowering a limit below what is in use refuses every
// request until enough has left); a dimension whose limit is removed forgets
// its charges. opts.Limits.Models is copied.
func (s *Server) SetOptions(opts Options) {
	if opts.CompletionMin == 0 && opts.CompletionMax == 0 {
		opts.CompletionMin, opts.CompletionMax = 20, 200
	}
	opts.CompletionMin = max(opts.CompletionMin, 0)
	opts.CompletionMax = max(opts.CompletionMax, 0)
	if opts.CompletionMax < opts.CompletionMin {
		opts.CompletionMin, opts.CompletionMax = opts.CompletionMax, opts.CompletionMin
	}
	if opts.CountTokens == nil {
		opts.CountTokens = defaultCountTokens
	}
	opts.Limits = opts.Limits.normalized()
	s.rngMu.Lock()
	s.rng = rand.New(rand.NewPCG(uint64(opts.Seed), 0x6661_6b65_7570)) //nolint:gosec // test data
	s.opts.Store(&opts)
	s.rngMu.Unlock()
}

// SetLimits changes only the provider limits (as SetOptions does), keeping
// the other options and the completion-length sequence.
func (s *Server) SetLimits(l ProviderLimits) {
	l = l.normalized()
	s.rngMu.Lock()
	o := *s.opts.Load()
	o.Limits = l
	s.opts.Store(&o)
	s.rngMu.Unlock()
}

// Limits returns the provider limits in force (normalized: Window is never
// 0). The caller may modify the result.
func (s *Server) Limits() ProviderLimits { return s.opts.Load().Limits.clone() }

// Stats returns the counters of the provider limits and of the requests in
// flight.
func (s *Server) Stats() Stats {
	st := Stats{InFlight: s.InFlight(), MaxInFlight: s.MaxInFlight()}
	s.lim.stats(&st)
	return st
}

// Breaches returns the number of requests refused by the provider limits
// since New or Reset.
func (s *Server) Breaches() int { return int(s.Stats().Breaches) }

func defaultCountTokens(_, text string) int { return (len(text) + 3) / 4 }

// drawCompletion draws a completion length in [CompletionMin, CompletionMax].
func (s *Server) drawCompletion(o *Options) int {
	if o.CompletionMax == o.CompletionMin {
		return o.CompletionMin
	}
	s.rngMu.Lock()
	n := o.CompletionMin + s.rng.IntN(o.CompletionMax-o.CompletionMin+1)
	s.rngMu.Unlock()
	return n
}

// Records returns a copy of the records, in arrival order.
func (s *Server) Records() []Record {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	out := make([]Record, len(s.records))
	for i, r := range s.records {
		out[i] = *r
		if r.Body != nil {
			out[i].Body = append([]byte(nil), r.Body...)
		}
	}
	return out
}

// recordsNoBody is Records without the bodies (for GET /_records).
func (s *Server) recordsNoBody() []Record {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	out := make([]Record, len(s.records))
	for i, r := range s.records {
		out[i] = *r
		out[i].Body = nil
	}
	return out
}

// Reset forgets the records, zeroes the counters of Stats and sets the
// in-flight high-water marks to the current numbers in flight. It does not
// clear the limits' windows: what the provider has charged stays charged.
func (s *Server) Reset() {
	s.recMu.Lock()
	clear(s.records)
	s.records = s.records[:0]
	s.recMu.Unlock()
	s.maxInFlight.Store(s.inFlight.Load())
	s.lim.resetStats()
}

// InFlight returns the number of requests currently being answered: from
// arrival until the answer is complete or the stream is aborted. The count
// drops just before the last write of an answer, so a client that has
// received a whole answer never finds it still counted, and concurrency
// audits built on MaxInFlight see no false overlap.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// MaxInFlight returns the high-water mark of InFlight since New or Reset.
func (s *Server) MaxInFlight() int { return int(s.maxInFlight.Load()) }

func (s *Server) enter() {
	n := s.inFlight.Add(1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			return
		}
	}
}

func (s *Server) addRecord(r *Record, maxRecords int) {
	s.recMu.Lock()
	if maxRecords > 0 && len(s.records) >= maxRecords {
		drop := len(s.records) - maxRecords + 1
		clear(s.records[:drop])
		s.records = s.records[drop:]
	}
	s.records = append(s.records, r)
	s.recMu.Unlock()
}

// finish completes a record and leaves the in-flight counts (the
// concurrency limits' too, for an admitted request).
func (s *Server) finish(r *Record, status, completion int, aborted bool, ls lease) {
	now := time.Now()
	s.recMu.Lock()
	r.Finished = now
	r.Status = status
	r.CompletionTokens = completion
	r.Aborted = aborted
	s.recMu.Unlock()
	ls.release()
	s.inFlight.Add(-1)
}

// markAborted marks a finished record as aborted (the final write of its
// stream failed).
func (s *Server) markAborted(r *Record) {
	s.recMu.Lock()
	r.Aborted = true
	s.recMu.Unlock()
}

// beginStream registers a stream goroutine; false once the server is closed.
func (s *Server) beginStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams.Add(1)
	return true
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// Start listens on addr (for example "127.0.0.1:0"), serves in the
// background and returns the address actually listened on.
func (s *Server) Start(addr string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", errors.New("fakeupstream: server closed")
	}
	if s.srv != nil {
		return "", errors.New("fakeupstream: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	s.conns = make(map[net.Conn]struct{})
	s.srv = &fasthttp.Server{
		Handler:            s.Handler,
		ErrorHandler:       s.errorHandler,
		Name:               "fakeupstream",
		Concurrency:        1 << 18,
		ReadBufferSize:     16 << 10,
		ReadTimeout:        30 * time.Second,
		IdleTimeout:        2 * time.Minute,
		WriteTimeout:       0, // a deadline on the whole response would cut long streams
		MaxRequestBodySize: 64 << 20,
		Logger:             nopLogger{},
		ConnState:          s.connState,
	}
	s.ln = ln
	s.serveErr = make(chan error, 1)
	srv := s.srv
	go func() { s.serveErr <- srv.Serve(ln) }()
	return ln.Addr().String(), nil
}

// connState tracks open connections so that Close can cut them and wait for
// their goroutines.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		s.connsMu.Lock()
		s.conns[c] = struct{}{}
		s.connsMu.Unlock()
		s.connWG.Add(1)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.connsMu.Lock()
		_, ok := s.conns[c]
		delete(s.conns, c)
		s.connsMu.Unlock()
		if ok {
			s.connWG.Done()
		}
	}
}

// Close stops serving: it closes the listener, cuts streams and sleeping
// requests short (their records are marked Aborted or finished early),
// closes every connection and waits for the goroutines serving them. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	ln, serveErr := s.ln, s.serveErr
	s.mu.Unlock()

	var err error
	if ln != nil {
		err = ln.Close()
		if e := <-serveErr; e != nil && err == nil {
			err = e
		}
		// Serve has returned: no new connection can appear.
		s.connsMu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.connsMu.Unlock()
		s.connWG.Wait()
	}
	// Every handler has returned, so every stream is registered.
	s.streams.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
