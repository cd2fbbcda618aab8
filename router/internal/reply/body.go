package reply

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringgate/ringgate/upstream"
)

// maxAnswerBytes caps an upstream answer read whole (a JSON answer to a
// streaming request: an error, say).
const maxAnswerBytes = upstream.DefaultMaxAnswerBytes

// WriteIdle is how long a stream's writes to its client may make no
// progress (the client stopped reading, its buffers full) before the client
// is taken to be gone: the call is cut and its slot freed. Without it a
// client that stops reading would hold its call, and the provider's
// connection, for ever (and past slot_ttl, uncounted).
const WriteIdle = 30 * time.Second

// AnswerWriteDeadline has a large answer read whole written as a stream's
// is: each part of it may take idle (WriteIdle), so a client that stops
// reading it is cut, and a slow one that reads on is not: a stalled reader
// would hold the connection's goroutine and the answer (up to 64 MiB) for
// as long as it kept the connection open. An answer that fits the
// socket's buffers is written without waiting: left as it is, no cost.
func AnswerWriteDeadline(ctx *fasthttp.RequestCtx, idle time.Duration) {
	if len(ctx.Response.Body()) < AnswerBuffered {
		return
	}
	body := ctx.Response.Body() // a raw body too (SetBodyRaw: an SSE read whole), which SwapBody drops
	ctx.Response.SwapBody(nil)  // the buffer is body's now, not the pool's
	ctx.Response.SetBodyStream(&progressBody{ctx: ctx, b: body, idle: idle}, len(body))
}

// progressBody moves the connection's write deadline on at each read
// fasthttp makes of it to write the next part; fasthttp clears it once
// the answer is written.
type progressBody struct {
	ctx  *fasthttp.RequestCtx
	b    []byte
	idle time.Duration
}

func (p *progressBody) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	_ = p.ctx.SetWriteDeadline(time.Now().Add(p.idle))
	n := copy(b, p.b)
	p.b = p.b[n:]
	return n, nil
}

// AnswerBuffered: an answer smaller than this fits a loopback or LAN
// socket's send buffer (Linux starts it at 16 KiB and grows it to 4 MiB).
const AnswerBuffered = 256 << 10

// ReadAnswer moves an answer into the client's response, failing past
// maxAnswerBytes: read whole already, its bytes change hands without a copy.
func ReadAnswer(dst, resp *fasthttp.Response) error {
	s := resp.BodyStream()
	if s == nil {
		resp.SwapBody(dst.SwapBody(resp.SwapBody(nil))[:0])
		return nil
	}
	w := dst.BodyWriter()
	bp := StreamBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(w, io.LimitReader(s, maxAnswerBytes+1), *bp)
	StreamBufs.Put(bp)
	if err != nil {
		return upstream.ReadError(err)
	}
	if n > maxAnswerBytes {
		return fmt.Errorf("%w: %w: over %d bytes", upstream.ErrUnreachable, upstream.ErrAnswerTooLarge, maxAnswerBytes)
	}
	return nil
}

// StreamBufs holds the buffers an answer is copied through (16 KiB each,
// as *[]byte): a body read whole, a stream, a peer's relayed stream.
var StreamBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// SetStream makes fn's writes the answer's body. An HTTP/1.1 client gets
// them chunked, as fn flushes them. An HTTP/1.0 client cannot read chunks
// (RFC 9112 forbids sending it any), and fasthttp frames every body stream
// in chunks, so it gets the whole stream once it has ended, with its
// length: fn runs here, into a buffer (at most maxAnswerBytes; past that
// its writes fail, as to a client gone, and the call is cut and settled).
func SetStream(ctx *fasthttp.RequestCtx, fn func(w *bufio.Writer)) {
	if ctx.Request.Header.IsHTTP11() {
		ctx.SetBodyStreamWriter(fn)
		return
	}
	body := &cappedBuffer{max: maxAnswerBytes}
	w := bufio.NewWriterSize(body, 4<<10)
	fn(w)
	_ = w.Flush()
	ctx.Response.SetBodyRaw(body.b)
}

// cappedBuffer gathers at most max bytes; a write past them fails.
type cappedBuffer struct {
	b   []byte
	max int
}

var errAnswerTooLarge = errors.New("answer over the buffer's size")

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if len(c.b)+len(p) > c.max {
		return 0, errAnswerTooLarge
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

// StreamDeadline moves a connection's write deadline on as a stream makes
// progress: each flush may take idle (WriteIdle). fasthttp writes a stream
// from its own goroutine through a pipe, so a client that does not read
// blocks that write, then the pipe, then the flush: the deadline stops
// moving and the blocked write fails.
type StreamDeadline struct {
	conn net.Conn
	idle time.Duration
}

// WriteDeadline is ctx's connection's stream deadline (taken before the
// stream writer runs: it must not touch ctx).
func WriteDeadline(ctx *fasthttp.RequestCtx, idle time.Duration) StreamDeadline {
	return StreamDeadline{conn: ctx.Conn(), idle: idle}
}

// Extend gives the next flush idle from now.
func (d StreamDeadline) Extend() {
	if d.conn != nil {
		_ = d.conn.SetWriteDeadline(time.Now().Add(d.idle))
	}
}

// Done clears the deadline for the connection's next request.
func (d StreamDeadline) Done() {
	if d.conn != nil {
		_ = d.conn.SetWriteDeadline(time.Time{})
	}
}

// Relay copies an owner's stream to the client as it arrives, flushing each
// read; a write error (the client hung up) stops it, and releasing the
// response closes the owner connection so the owner sees the hang-up too.
func Relay(w *bufio.Writer, src io.Reader, wd StreamDeadline) {
	if src == nil {
		return
	}
	bp := StreamBufs.Get().(*[]byte)
	defer StreamBufs.Put(bp)
	for {
		n, err := src.Read(*bp)
		if n > 0 {
			wd.Extend()
			if _, werr := w.Write((*bp)[:n]); werr != nil {
				return
			}
			if werr := w.Flush(); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Dropped reads resp, an answer whose client is gone, for its usage: a
// body read whole (a JSON request), or the answer to a stream request that
// is not text/event-stream, read now (bounded by ReadAnswer). whole is
// false for a stream left unread: dropping it closes the connection and
// cuts the generation, whose length is unknown (the reservation stands).
// sse: its Content-Type says it is a stream.
func Dropped(resp *fasthttp.Response) (body []byte, sse, whole bool) {
	sse = bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream"))
	if resp.BodyStream() == nil {
		return resp.Body(), sse, true // (with a body stream, Body would read it)
	}
	if sse {
		return nil, sse, false
	}
	var read fasthttp.Response
	if err := ReadAnswer(&read, resp); err != nil {
		return nil, sse, false
	}
	return read.Body(), sse, true
}
