// Package admit is where a request's room is decided. A request counts on
// several sources of room: the provider's budgets, its tenant's limits
// (on the tenant's owner, on a fallback share, on the catch-up share or on
// a spill's budget) and the levels above its tenant, its model's and its
// team's. Decide asks each of them in order and admits the request on all
// of them or on none. That rule is written here and nowhere else: a new
// source of room, a quorum rule or a spend budget, is one more Room.
//
// It knows no HTTP, tenants, rings or stores. A Room is anything that can
// charge a request or refuse it; what a refusal means to the client (a
// 429, a wait in a line, a hop to another node) is the caller's to say.
package admit

// Verdict is what one room says of a request.
type Verdict uint8

const (
	// Taken: the room charged the request.
	Taken Verdict = iota
	// Shadowed: the room refuses the request, but its limits are in
	// shadow mode: the request goes on, not charged by this room.
	Shadowed
	// Refused: the room has no room for the request now.
	Refused
	// Behind: others wait for this room already; the request goes
	// behind them rather than past them.
	Behind
	// Moved: the room's state is on another node now, or ended; the
	// request is decided there, or decided again.
	Moved
)

func (v Verdict) String() string {
	switch v {
	case Taken:
		return "taken"
	case Shadowed:
		return "shadowed"
	case Refused:
		return "refused"
	case Behind:
		return "behind"
	case Moved:
		return "moved"
	}
	return "unknown"
}

// A Room is one source of room a request counts on.
type Room interface {
	// Take charges the request, or refuses it and charges nothing: a
	// room made of parts takes all of them or none.
	Take() Verdict
	// Cancel takes back what Take charged (after Taken; a room that
	// shadowed charged nothing). The request was not sent.
	Cancel()
}

// Outcome is how one decision ended.
type Outcome struct {
	// Verdict is Taken when every room took the request (some may have
	// shadowed: Shadowed says), else the verdict of the first room that
	// did not.
	Verdict Verdict
	// At is the index of the room that did not take the request;
	// len(rooms) when all did.
	At int
	// Shadowed: a room in shadow mode refused the request, which goes
	// on uncharged there.
	Shadowed bool
}

// Decide asks rooms in order. A room that takes or shadows the request
// passes it to the next; the first that refuses, puts it behind others or
// moved ends the decision, and what the rooms before it took is taken
// back, last first. The request is then charged nowhere.
func Decide(rooms []Room) Outcome {
	o := Outcome{At: len(rooms)}
	for i, room := range rooms {
		switch v := room.Take(); v {
		case Taken:
		case Shadowed:
			o.Shadowed = true
		default:
			for j := i - 1; j >= 0; j-- {
				rooms[j].Cancel()
			}
			return Outcome{Verdict: v, At: i}
		}
	}
	return o
}
