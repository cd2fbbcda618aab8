package router

import "github.com/ringgate/ringgate/router/internal/hopsign"

// A hop is a client request one node hands to the tenant's owner, signed
// with the cluster secret (package hopsign). The owner enforces a hop
// itself, whatever its own ring says, and never forwards it again, with one
// exception: a node that handed the tenant over to another after the sender
// picked it passes the hop on to that node, along the chain of hand-overs
// of changes in quick succession, at most hopsign.MaxHops in all, so a hop
// can neither bounce nor loop.
const (
	hopHeader = hopsign.HopHeader
	sigHeader = hopsign.SigHeader
	maxHops   = hopsign.MaxHops
)
