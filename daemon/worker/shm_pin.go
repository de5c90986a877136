package worker

// hostPinner is a backend that can page-lock host memory for the device's
// DMA engines (CUDA: cuMemHostRegister). Copies between the device and
// pinned memory go straight there; into ordinary pages the driver stages
// them through a pinned bounce buffer of its own, one chunk at a time.
type hostPinner interface {
	PinHost(b []byte) error
}

// pinShared pins the shared region when the backend can: KV blocks and
// logits are copied between the device and it. The region stays mapped
// and pinned for the process's life. Failure costs only speed.
func (rk *rank) pinShared() {
	p, ok := rk.be.(hostPinner)
	if !ok || rk.shm == nil {
		return
	}
	if err := p.PinHost(rk.shm.b); err != nil {
		rk.log.Warn("shared memory not pinned: device copies through it are staged", "err", err)
	}
}
