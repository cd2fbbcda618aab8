package levels

import (
	"bytes"
	"strconv"

	"github.com/ringgate/ringgate/limiter"
	"github.com/ringgate/ringgate/router/internal/tenant"
)

// UsedHeader carries, on an owner's answer to a hop for a tenant with
// levels, what the tenant and each level had used once the call was
// admitted: "<name>=<requests>,<tokens>;…". The edge keeps it to seed its
// fallback shares (NoteUsed), and never passes it to the client.
const UsedHeader = "x-ringgate-levels-used"

func usedOf(d *limiter.Decision) [2]int64 {
	var u [2]int64
	if d.LimitRequests > 0 {
		u[0] = max(0, d.LimitRequests-d.RemainingRequests)
	}
	if d.LimitTokens > 0 {
		u[1] = max(0, d.LimitTokens-d.RemainingTokens)
	}
	return u
}

// AppendUsed appends UsedHeader's value to b: own is what the tenant
// named had used (its own decision, before tighten: Headers), then each
// level its owner decided.
func (s *Set) AppendUsed(b []byte, name string, own [2]int64) []byte {
	add := func(name string, u [2]int64) {
		if len(b) > 0 {
			b = append(b, ';')
		}
		b = append(b, name...)
		b = append(b, '=')
		b = strconv.AppendInt(b, u[0], 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, u[1], 10)
	}
	add(name, own)
	for i := range s.n {
		if l := &s.l[i]; !l.away && !l.shadow && l.lim == l.e.Core().Lim {
			add(l.e.Name, l.used)
		}
	}
	return b
}

// NoteUsed records at now, for t and its levels, what the owner's answer
// says they used (v, UsedHeader's value); an answer without it changes
// nothing.
func NoteUsed(t *tenant.Tenant, v []byte, now int64) {
	for len(v) > 0 {
		var part []byte
		part, v, _ = bytes.Cut(v, []byte{';'})
		name, nums, ok := bytes.Cut(part, []byte{'='})
		if !ok {
			return
		}
		rq, tk, ok := bytes.Cut(nums, []byte{','})
		if !ok {
			return
		}
		requests, err1 := strconv.ParseInt(string(rq), 10, 64)
		tokens, err2 := strconv.ParseInt(string(tk), 10, 64)
		if err1 != nil || err2 != nil {
			return
		}
		var e *tenant.Tenant
		switch {
		case string(name) == t.Name:
			e = t
		case t.Team != nil && string(name) == t.Team.Name:
			e = t.Team
		default:
			for _, m := range t.Models {
				if string(name) == m.Name {
					e = m
				}
			}
		}
		if e != nil {
			e.Core().Seen.Note(now, requests, tokens)
		}
	}
}
