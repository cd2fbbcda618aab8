package router

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

// A hop is a client request one node hands to the tenant's owner. It carries
// who sent it, to whom, the sender's ring version, a time and a nonce, signed
// with the cluster secret over all of that plus the method, path, tenant key
// and body hash. The owner enforces a hop itself, whatever its own ring says,
// and never forwards it again, with one exception: a node that handed the
// tenant over to another after the sender picked it passes the hop on to
// that node, along the chain of hand-overs of changes in quick succession,
// at most maxHops in all, so a hop can neither bounce nor loop.
const (
	hopHeader = "X-Ringgate-Hop"
	sigHeader = "X-Ringgate-Signature"
)

// maxHops is how many times a request may travel between nodes: to the
// owner, and on from an owner that had just handed the tenant over, twice
// (two changes in a row).
const maxHops = 3

// hopInfo is a parsed hop header.
type hopInfo struct {
	from, to    string
	ringVersion uint64
	at          time.Time
	nonce       string
	hops        int // 1 for a request sent to the owner, more passed on
}

// signer signs and checks hops. Without a secret it can do neither: peer
// traffic is off and the node enforces every tenant itself.
type signer struct {
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

func newSigner(secret []byte, skew time.Duration, now func() time.Time) *signer {
	if skew <= 0 {
		skew = 5 * time.Second
	}
	return &signer{secret: secret, skew: skew, now: now, started: now(), nonces: make(map[string]time.Time)}
}

func (s *signer) enabled() bool { return len(s.secret) > 0 }

// sign sets the hop headers on req, a copy of the client's request on its way
// from node from to node to, its hops-th hop (1 or 2; peer calls are 1).
func (s *signer) sign(req *fasthttp.Request, from, to string, ringVersion uint64, hops ...int) {
	var nb [12]byte
	_, _ = rand.Read(nb[:])
	fields := []string{from, to, strconv.FormatUint(ringVersion, 10),
		strconv.FormatInt(s.now().UnixMilli(), 10), hex.EncodeToString(nb[:])}
	if len(hops) > 0 && hops[0] > 1 {
		fields = append(fields, strconv.Itoa(hops[0]))
	}
	hop := strings.Join(fields, ",")
	req.Header.Set(hopHeader, hop)
	req.Header.Set(sigHeader, s.mac(req, hop))
}

// hopSender is the node that sent a hop, from its header (verified when
// the request came in); "" for a client's request.
func hopSender(h *fasthttp.RequestHeader) string {
	from, _, _ := strings.Cut(string(h.Peek(hopHeader)), ",")
	return from
}

// signedHeaders are the client's headers a hop carries that the owner
// acts on besides the key: the queue class, and those it sends on to the
// provider (upstream.Provider.Prepare), which name the organization or
// project billed. Changed on the way, the hop does not verify.
var signedHeaders = []string{"Authorization", "x-api-key", priorityHeader,
	"OpenAI-Organization", "OpenAI-Project", "OpenAI-Beta", "anthropic-version", "anthropic-beta", "Accept"}

// signedHeaderNames are signedHeaders as fasthttp writes them, for
// copyHopHeaders.
var signedHeaderNames = func() [][]byte {
	names := make([][]byte, len(signedHeaders))
	for i, h := range signedHeaders {
		names[i] = []byte(textproto.CanonicalMIMEHeaderKey(h))
	}
	return names
}()

// mac signs the method, the path and query, the signed headers (each
// length-prefixed: no value can pass for another's), the body's hash and
// the hop header. v2: v1 signed neither the query nor the headers past the
// key.
func (s *signer) mac(req *fasthttp.Request, hop string) string {
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
	for _, h := range signedHeaders {
		field(req.Header.Peek(h))
	}
	field(bodySum[:])
	field([]byte(hop))
	return hex.EncodeToString(m.Sum(nil))
}

var (
	errHopUnsigned    = errors.New("peer hops are disabled on this node (no cluster.secret)")
	errHopMalformed   = errors.New("malformed hop header")
	errHopSignature   = errors.New("bad hop signature")
	errHopStale       = errors.New("hop timestamp outside the allowed clock skew")
	errHopReplay      = errors.New("hop replayed")
	errHopTarget      = errors.New("hop addressed to another node")
	errHopBeforeStart = errors.New("hop signed before this node started")
)

// verify checks a received hop addressed to self.
func (s *signer) verify(req *fasthttp.Request, self string) (hopInfo, error) {
	if !s.enabled() {
		return hopInfo{}, errHopUnsigned
	}
	hop := string(req.Header.Peek(hopHeader))
	parts := strings.Split(hop, ",")
	if len(parts) != 5 && len(parts) != 6 {
		return hopInfo{}, errHopMalformed
	}
	hops := 1
	if len(parts) == 6 {
		n, err := strconv.Atoi(parts[5])
		if err != nil || n < 2 || n > maxHops {
			return hopInfo{}, errHopMalformed
		}
		hops = n
	}
	version, err1 := strconv.ParseUint(parts[2], 10, 64)
	ms, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || len(parts[4]) != 24 {
		return hopInfo{}, errHopMalformed
	}
	want := s.mac(req, hop)
	if !hmac.Equal([]byte(want), req.Header.Peek(sigHeader)) {
		return hopInfo{}, errHopSignature
	}
	info := hopInfo{from: parts[0], to: parts[1], ringVersion: version, at: time.UnixMilli(ms), nonce: parts[4], hops: hops}
	if info.to != self {
		return info, errHopTarget
	}
	now := s.now()
	if d := now.Sub(info.at); d > s.skew || d < -s.skew {
		return info, fmt.Errorf("%w (%s)", errHopStale, d.Round(time.Millisecond))
	}
	if info.at.Before(s.started.Add(-restartSlack)) {
		// Its nonce could be in the memory of the process before this
		// one only: a replay across a restart.
		return info, errHopBeforeStart
	}
	if err := s.remember(info.nonce, now); err != nil {
		return info, err
	}
	return info, nil
}

// remember records a nonce, refusing one already seen within the skew window.
func (s *signer) remember(nonce string, now time.Time) error {
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
		return errHopReplay
	}
	if len(s.nonces) >= maxNonces {
		return errHopReplay
	}
	s.nonces[nonce] = now
	return nil
}
