package reply

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ringgate/ringgate/router/internal/logmeter"
)

// maxBodyBudget caps a body's budget whatever the configured sizes.
const maxBodyBudget = 24 * time.Hour

// BodyBudget is grace + size/rate, size being maxBody when unknown (< 0) or
// larger (such a body is refused with 413 before it is read). 0 (keep the
// header deadline) when the rate is unset.
func BodyBudget(size, maxBody, rate int64, grace time.Duration) time.Duration {
	if rate <= 0 {
		return 0
	}
	if size < 0 || size > maxBody {
		size = maxBody
	}
	secs := size / rate
	if secs >= int64(maxBodyBudget/time.Second) {
		return maxBodyBudget
	}
	d := time.Duration(secs)*time.Second + time.Duration(size%rate)*time.Second/time.Duration(rate)
	return min(max(grace, 0)+d, maxBodyBudget)
}

// HTTPLogger routes fasthttp's own messages (a malformed request, a
// connection error) into slog: one line a second at most, saying how many
// it stands for (any client can send malformed requests), each cut short,
// and never with the bytes of the request, which fasthttp quotes after
// "contents:" (the tenant's key, the admin token, a hop's signature).
type HTTPLogger struct {
	l     *slog.Logger
	meter logmeter.Meter
}

// NewHTTPLogger is the server's logger, writing to l.
func NewHTTPLogger(l *slog.Logger) *HTTPLogger { return &HTTPLogger{l: l} }

// httpLogEvery and httpLogMax bound fasthttp's lines.
const (
	httpLogEvery = time.Second
	httpLogMax   = 300
)

// Printf is fasthttp.Logger's.
func (f *HTTPLogger) Printf(format string, args ...any) {
	ok, muted := f.meter.Allow(time.Now().UnixNano(), httpLogEvery)
	if !ok {
		return
	}
	f.l.Warn("http", "detail", redactHTTPDetail(fmt.Sprintf(format, args...)), "not_logged", muted)
}

// redactHTTPDetail drops the request bytes fasthttp quotes in an error
// and bounds what is left.
func redactHTTPDetail(s string) string {
	for _, cut := range []string{"error when reading request headers:", ", contents:"} {
		if i := strings.Index(s, cut); i >= 0 {
			s = s[:i+len(cut)] + " (request bytes not logged)"
		}
	}
	if len(s) > httpLogMax {
		s = strings.ToValidUTF8(s[:httpLogMax], "") + "…"
	}
	return s
}
