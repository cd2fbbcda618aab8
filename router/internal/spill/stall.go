package spill

// StallEnd begins sp's end on its owner and stops there, for the router's
// tests of a request that meets a spill ending slowly: sp is ending (the
// owner's loop leaves it alone) and closed, as End has it while its
// ledger's reports are in flight. finish closes its done; the rest of the
// end (the limiter unsealed, the holder cleared) is the test's.
func (sp *Spill) StallEnd() (finish func()) {
	sp.ending.Store(true)
	sp.mu.Lock()
	sp.closed.Store(true)
	sp.mu.Unlock()
	return func() { close(sp.done) }
}
