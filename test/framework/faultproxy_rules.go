package framework

// Stop ends one rule (Clear ends them all): requests it matched pass from
// now on; Injected still counts what it did. Watches it holds stay held
// until DropWatches releases them, and requests a FaultHold rule holds
// until Release.
func (p *FaultProxy) Stop(r *FaultRule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.stopped = true
}
