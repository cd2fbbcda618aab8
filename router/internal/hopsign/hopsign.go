// Package hopsign signs and checks the requests one node sends another
// with the cluster secret: a hop (a client's request handed to its
// tenant's owner) and every peer call.
//
// A hop carries who sent it, to whom, the sender's ring version, a time and
// a nonce, signed over all of that plus the method, path, query, the
// headers the owner acts on and the body's hash. The package owns the
// header format, the MAC, the clock-skew check, the replay memory and the
// words an owner refuses a hop with (RefusedHeader). It knows nothing of
// tenants, rings or what a hop asks for.
package hopsign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The headers of a hop.
const (
	HopHeader = "X-Ringgate-Hop"
	SigHeader = "X-Ringgate-Signature"
)

// PriorityHeader lowers a request's queue class: the owner acts on it, so
// a hop signs it.
const PriorityHeader = "x-ringgate-priority"

// MaxHops is how many times a request may travel between nodes: to the
// owner, and on from an owner that had just handed the tenant over, twice
// (two changes in a row).
const MaxHops = 3

// Info is a parsed hop header.
type Info struct {
	From, To    string
	RingVersion uint64
	At          time.Time
	Nonce       string
	Hops        int // 1 for a request sent to the owner, more passed on
}

// Signer signs and checks hops. Without a secret it can do neither: peer
// traffic is off and the node enforces every tenant itself.
type Signer struct {
	secret []byte
	skew   time.Duration
	now    func() time.Time

	// started is when this signer (this process) began: a hop signed
	// before it was captured before a restart, and its nonce is not in
	// this process's memory.
	started time.Time

	mu     sync.Mutex
	nonces map[string]time.Time // seen nonces until they are older than skew
	sweep  time.Time
}

// restartSlack is how much older than the process a hop may be: a peer's
// clock a little behind this one's (NTP keeps a LAN within milliseconds).
// A hop signed before that was signed before the restart and was meant for
// the process that is gone.
const restartSlack = 250 * time.Millisecond

// maxNonces bounds replay memory; past it, hops are refused until old nonces
// age out (a node receiving a million hops within the skew window is under
// attack or misconfigured, and refusing is the safe side).
const maxNonces = 1 << 20

// New makes a Signer with the cluster secret (none: hops are off), the
// clock skew it accepts between nodes (5 s when 0) and its clock.
func New(secret []byte, skew time.Duration, now func() time.Time) *Signer {
	if skew <= 0 {
		skew = 5 * time.Second
	}
	return &Signer{secret: secret, skew: skew, now: now, started: now(), nonces: make(map[string]time.Time)}
}

// WithClock is a new Signer with s's secret and skew on the clock now: a
// process started anew, as far as the hops it takes are concerned.
func (s *Signer) WithClock(now func() time.Time) *Signer { return New(s.secret, s.skew, now) }

// Enabled reports whether the Signer has a secret.
func (s *Signer) Enabled() bool { return len(s.secret) > 0 }

// Sign sets the hop headers on req, a copy of the client's request on its way
// from node from to node to, its hops-th hop (1 or 2; peer calls are 1).
func (s *Signer) Sign(req *fasthttp.Request, from, to string, ringVersion uint64, hops ...int) {
	var nb [12]byte
	_, _ = rand.Read(nb[:])
	fields := []string{from, to, strconv.FormatUint(ringVersion, 10),
		strconv.FormatInt(s.now().UnixMilli(), 10), hex.EncodeToString(nb[:])}
	if len(hops) > 0 && hops[0] > 1 {
		fields = append(fields, strconv.Itoa(hops[0]))
	}
	hop := strings.Join(fields, ",")
	req.Header.Set(HopHeader, hop)
	req.Header.Set(SigHeader, s.mac(req, hop))
}

// Sender is the node that sent a hop, from its header (verified when
// the request came in); "" for a client's request.
func Sender(h *fasthttp.RequestHeader) string {
	from, _, _ := strings.Cut(string(h.Peek(HopHeader)), ",")
	return from
}

// SignedHeaders are the client's headers a hop carries that the owner
// acts on besides the key: the queue class, and those it sends on to the
// provider (upstream.Provider.Prepare), which name the organization or
// project billed. Changed on the way, the hop does not verify.
var SignedHeaders = []string{"Authorization", "x-api-key", PriorityHeader,
	"OpenAI-Organization", "OpenAI-Project", "OpenAI-Beta", "anthropic-version", "anthropic-beta", "Accept"}

// SignedHeaderNames are SignedHeaders as fasthttp writes them.
var SignedHeaderNames = func() [][]byte {
	names := make([][]byte, len(SignedHeaders))
	for i, h := range SignedHeaders {
		names[i] = []byte(textproto.CanonicalMIMEHeaderKey(h))
	}
	return names
}()

// mac signs the method, the path and query, the signed headers (each
// length-prefixed: no value can pass for another's), the body's hash and
// the hop header. v2: v1 signed neither the query nor the headers past the
// key.
func (s *Signer) mac(req *fasthttp.Request, hop string) string {
	bodySum := sha256.Sum256(req.Body())
	m := hmac.New(sha256.New, s.secret)
	var n [8]byte
	field := func(b []byte) {
		m.Write(strconv.AppendInt(n[:0], int64(len(b)), 10))
		m.Write([]byte{':'})
		m.Write(b)
	}
	m.Write([]byte("ringgate-hop-v2\n"))
	field(req.Header.Method())
	field(req.URI().PathOriginal())
	field(req.URI().QueryString())
	for _, h := range SignedHeaders {
		field(req.Header.Peek(h))
	}
	field(bodySum[:])
	field([]byte(hop))
	return hex.EncodeToString(m.Sum(nil))
}

// Why Verify refuses a hop.
var (
	ErrUnsigned    = errors.New("peer hops are disabled on this node (no cluster.secret)")
	ErrMalformed   = errors.New("malformed hop header")
	ErrSignature   = errors.New("bad hop signature")
	ErrStale       = errors.New("hop timestamp outside the allowed clock skew")
	ErrReplay      = errors.New("hop replayed")
	ErrTarget      = errors.New("hop addressed to another node")
	ErrBeforeStart = errors.New("hop signed before this node started")
)

// Verify checks a received hop addressed to self.
func (s *Signer) Verify(req *fasthttp.Request, self string) (Info, error) {
	if !s.Enabled() {
		return Info{}, ErrUnsigned
	}
	hop := string(req.Header.Peek(HopHeader))
	parts := strings.Split(hop, ",")
	if len(parts) != 5 && len(parts) != 6 {
		return Info{}, ErrMalformed
	}
	hops := 1
	if len(parts) == 6 {
		n, err := strconv.Atoi(parts[5])
		if err != nil || n < 2 || n > MaxHops {
			return Info{}, ErrMalformed
		}
		hops = n
	}
	version, err1 := strconv.ParseUint(parts[2], 10, 64)
	ms, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || len(parts[4]) != 24 {
		return Info{}, ErrMalformed
	}
	want := s.mac(req, hop)
	if !hmac.Equal([]byte(want), req.Header.Peek(SigHeader)) {
		return Info{}, ErrSignature
	}
	info := Info{From: parts[0], To: parts[1], RingVersion: version, At: time.UnixMilli(ms), Nonce: parts[4], Hops: hops}
	if info.To != self {
		return info, ErrTarget
	}
	now := s.now()
	if d := now.Sub(info.At); d > s.skew || d < -s.skew {
		return info, fmt.Errorf("%w (%s)", ErrStale, d.Round(time.Millisecond))
	}
	if info.At.Before(s.started.Add(-restartSlack)) {
		// Its nonce could be in the memory of the process before this
		// one only: a replay across a restart.
		return info, ErrBeforeStart
	}
	if err := s.remember(info.Nonce, now); err != nil {
		return info, err
	}
	return info, nil
}

// remember records a nonce, refusing one already seen within the skew window.
func (s *Signer) remember(nonce string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.sweep) > s.skew {
		for n, seen := range s.nonces {
			if now.Sub(seen) > 2*s.skew {
				delete(s.nonces, n)
			}
		}
		s.sweep = now
	}
	if _, dup := s.nonces[nonce]; dup {
		return ErrReplay
	}
	if len(s.nonces) >= maxNonces {
		return ErrReplay
	}
	s.nonces[nonce] = now
	return nil
}
