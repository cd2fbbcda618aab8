package reply

import (
	"errors"
	"fmt"
	"net"

	"github.com/valyala/fasthttp"
)

// ReadError answers an error met reading a request, before any handler
// runs: a body over maxBody, headers over the read buffer, a read timeout,
// or a malformed request.
func ReadError(ctx *fasthttp.RequestCtx, err error, maxBody int64) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		Fail(ctx, fasthttp.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("Request body too large: the limit is %d bytes.", maxBody))
		return
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		// The headers did not fit the server's read buffer (4 KiB).
		Fail(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "invalid_request_error", "request_header_fields_too_large",
			"Request headers too large: the limit is 4 KiB in all.")
		return
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		Fail(ctx, fasthttp.StatusRequestTimeout, "invalid_request_error", "request_timeout", "Request read timed out.")
		return
	}
	Fail(ctx, fasthttp.StatusBadRequest, "invalid_request_error", "bad_request", "Malformed HTTP request.")
}
