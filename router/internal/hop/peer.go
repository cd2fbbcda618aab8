package hop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/router/internal/hopsign"
	"github.com/ringgate/ringgate/router/internal/reply"
)

// Peer calls are the signed requests nodes send each other beside hops:
// a hand-over, a hop's cancel, a spill's announcement, an admin view. The
// caller says what they ask and signs them (package hopsign): Post and Do
// carry them and read the answer, CheckPost checks one that arrives.

// Post POSTs msg as JSON to path on the peer to (at addr), signed by
// sign, and returns the answer's status and body.
func (p *Pool) Post(addr, to, path string, msg any, sign func(*fasthttp.Request), timeout time.Duration) (int, []byte, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return 0, nil, err
	}
	return p.Do(addr, to, fasthttp.MethodPost, path, body, sign, timeout)
}

// Do sends a request signed by sign to path on the peer to (at addr): a
// POST of the JSON body, or a GET when body is nil.
func (p *Pool) Do(addr, to, method, path string, body []byte, sign func(*fasthttp.Request), timeout time.Duration) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetHost(addr)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	sign(req)
	if err := p.Call(addr, req, resp, timeout); err != nil {
		return 0, nil, err
	}
	// The answer is streamed (the peers' pool streams every body): read
	// with BodyWriteTo, which returns a cut body's error, where Body()
	// would return the error's text as the body.
	var answer bytes.Buffer
	if err := resp.BodyWriteTo(&answer); err != nil {
		return 0, nil, fmt.Errorf("read %s's answer: %w", to, err)
	}
	return resp.StatusCode(), answer.Bytes(), nil
}

// CheckPost checks a peer's POST to one of the peer paths, addressed to
// the node self: the method and the hop signature (s). It answers the
// refusal itself, and counts a bad signature in refused.
func CheckPost(ctx *fasthttp.RequestCtx, s *hopsign.Signer, self string, refused interface{ Inc() }) (hopsign.Info, bool) {
	if !ctx.IsPost() {
		reply.Fail(ctx, fasthttp.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Use POST.")
		return hopsign.Info{}, false
	}
	info, err := s.Verify(&ctx.Request, self)
	if err != nil {
		refused.Inc()
		reply.Fail(ctx, fasthttp.StatusUnauthorized, "invalid_request_error", "invalid_peer_signature",
			"Peer request refused: "+err.Error()+".")
		return hopsign.Info{}, false
	}
	return info, true
}
