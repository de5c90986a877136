package models

import "github.com/pocketllm/pocketllm/kernels"

// Scratch holds the activation buffers of forward passes, allocated on
// first use and reused while they are large enough, so a decode step
// allocates nothing on the backend.
type Scratch struct {
	be   kernels.Backend
	rows int
	bufs map[string]kernels.Buf
	// X is the residual stream, [rows, hidden].
	X kernels.Buf
	// Logits receives the LM head output of the rows asked for.
	Logits kernels.Buf
	// moved counts, with the model, the buffers replaced by larger ones
	// (see Model.ScratchGen); nil for a scratch of no model.
	moved *uint64
}

func newScratch(be kernels.Backend, c *Config, rows int) *Scratch {
	return &Scratch{be: be, rows: rows, bufs: map[string]kernels.Buf{},
		X: be.NewBuf(rows * c.HiddenSize)}
}

// Buf returns the named buffer with at least n elements.
func (s *Scratch) Buf(name string, n int) kernels.Buf {
	b, ok := s.bufs[name]
	if !ok || b.Len() < n {
		if ok && s.moved != nil {
			*s.moved++
		}
		b = s.be.NewBuf(n)
		s.bufs[name] = b
	}
	return b
}

// Zeros returns a buffer of at least n zeros: a scratch buffer that no op
// writes (NewBuf zeroes it). Clearing a buffer by adding two of these is an
// ordinary op, which a recorded decode step (a CUDA graph) replays; a host
// Write could not be recorded.
func (s *Scratch) Zeros(n int) kernels.Buf { return s.Buf("zeros", n) }
