package models

import (
	"errors"
	"fmt"
	"sync"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

// Seq is the state a forward pass reads and extends: the sequence's KV
// blocks in a pool, and where the new tokens start. The cache package owns
// the blocks; Forward only writes the slots of the new positions.
type Seq struct {
	Pool kernels.KVPool
	// Table lists the blocks holding positions [0, Start+len(tokens)).
	Table []int32
	// Start is the position of the first new token (the tokens before it
	// are already in the KV blocks).
	Start int
	// State is per-sequence recurrent state for architectures that keep
	// one (hybrid linear-attention layers); nil for pure attention models.
	State any
}

// Logits selects which rows' logits Forward returns.
type Logits int

const (
	// LastLogits returns the logits of the last new token only.
	LastLogits Logits = iota
	// AllLogits returns logits for every new token, [len(tokens), vocab].
	AllLogits
	// NoLogits skips the LM head (pure prefill of a prefix).
	NoLogits
	// MarkedLogits returns the logits at each position the sequence's
	// state was marked at (MarkingState.HoldAt: the row of the token before
	// the position), then those of the last new token: [marks+1, vocab].
	// A snapshot taken inside a pass keeps what a pass ending there
	// returns.
	MarkedLogits
	// LastHidden returns the last new token's final hidden state, after
	// the final norm, where the LM head would start: [hidden]. An
	// embedding by last-token pooling (Qwen3-Embedding's).
	LastHidden
	// AllHidden returns every new token's final hidden state, [len(tokens),
	// hidden]: an embedding by mean pooling.
	AllHidden
	// rowLogits is a pass's mode for the rows of Pass.LogitRows (Forward
	// turns MarkedLogits into it); Forward does not take it.
	rowLogits
	// lastPairs returns a tensor-parallel group's argmax pairs of the
	// last new token (kernels.ArgmaxOps), [2·ranks]: ForwardGreedy's mode.
	lastPairs
)

// ErrContext is returned when a sequence would exceed the model's context.
var ErrContext = errors.New("context length exceeded")

// Model is a loaded model bound to a backend. Forward is safe to call from
// one goroutine at a time (the scheduler serialises passes); scratch
// buffers are reused across calls.
type Model struct {
	Name    string
	Config  *Config
	Backend kernels.Backend
	net     Network

	// MaxChunk bounds the tokens processed in one pass; longer inputs are
	// prefilled in chunks so that activation memory stays bounded.
	MaxChunk int

	mu      sync.Mutex
	scratch *Scratch
	moved   uint64 // see ScratchGen
}

// Network is what an architecture file builds: its layers bound to backend
// tensors, and how to run them.
type Network interface {
	// KVSpec describes the per-token KV the network keeps (Blocks and
	// BlockSize are filled in by the caller).
	KVSpec() kernels.KVSpec
	// Forward runs the new tokens of p through the network, leaving the
	// final hidden states (after the final norm) in p.Scratch.X, or logits
	// in p.Scratch.Logits when p.WantLogits.
	Forward(p *Pass) error
	// NewState returns fresh per-sequence recurrent state, or nil.
	NewState() any
	// WeightBytes is the size of the weights the network reads per token
	// (all of them for dense models).
	WeightBytes() int64
}

// Pass is one forward call's inputs and scratch.
type Pass struct {
	Tokens []int32
	Pos    []int32 // absolute position of each token
	Slots  []int32 // KV slot of each token
	Seq    Seq
	Attn   kernels.AttnSeq
	Rows   int
	Logits Logits
	// LogitRows are the rows whose logits a rowLogits pass computes.
	LogitRows []int32
	Scratch   *Scratch
}

// New builds a model of the architecture config names from src.
func New(name string, cfg *Config, src Source, be kernels.Backend) (*Model, error) {
	ctor, ok := architectures[cfg.Arch()]
	if !ok {
		return nil, fmt.Errorf("architecture %q: %w", cfg.Arch(), ErrUnknownArch)
	}
	net, err := ctor(cfg, newBinder(cfg, src, be))
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", cfg.Arch(), err)
	}
	if err := bindMoE(net); err != nil {
		return nil, fmt.Errorf("build %s: %w", cfg.Arch(), err)
	}
	return &Model{Name: name, Config: cfg, Backend: be, net: net, MaxChunk: 512}, nil
}

// KVSpec returns the pool shape for blocks blocks of blockSize tokens.
func (m *Model) KVSpec(blocks, blockSize int) kernels.KVSpec {
	s := m.net.KVSpec()
	s.Blocks, s.BlockSize = blocks, blockSize
	return s
}

// NewState returns fresh recurrent state for a new sequence (nil for pure
// attention models).
func (m *Model) NewState() any { return m.net.NewState() }

// WeightBytes is the bytes of weights read per decoded token.
func (m *Model) WeightBytes() int64 { return m.net.WeightBytes() }

// Forward runs tokens at positions seq.Start.. and returns logits as asked:
// [vocab] for LastLogits, [len(tokens), vocab] for AllLogits.
func (m *Model) Forward(seq Seq, tokens []int32, want Logits) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("forward: no tokens")
	}
	end := seq.Start + len(tokens)
	if m.Config.MaxPositions > 0 && end > m.Config.MaxPositions {
		return nil, fmt.Errorf("%w: %d tokens, model allows %d", ErrContext, end, m.Config.MaxPositions)
	}
	if seq.Pool != nil {
		bs := seq.Pool.Spec().BlockSize
		if len(seq.Table)*bs < end {
			return nil, fmt.Errorf("forward: block table covers %d positions, need %d", len(seq.Table)*bs, end)
		}
		for _, blk := range seq.Table[:(end+bs-1)/bs] {
			if blk < 0 || int(blk) >= seq.Pool.Spec().Blocks {
				return nil, fmt.Errorf("forward: block %d outside the pool", blk)
			}
		}
	}
	vocab := m.Config.VocabSize
	for _, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("forward: token id %d outside the vocabulary (%d)", t, vocab)
		}
	}
	var marks []int
	var out []float32
	hid := m.Config.HiddenSize
	switch want {
	case LastLogits, NoLogits, LastHidden:
	case lastPairs:
		if d := decoderOf(m.net); d == nil || d.pairs == nil {
			return nil, fmt.Errorf("forward: logits mode %d", want)
		}
	case AllLogits:
		out = make([]float32, 0, len(tokens)*vocab)
	case AllHidden:
		out = make([]float32, 0, len(tokens)*hid)
	case MarkedLogits:
		if ms, ok := seq.State.(interface{ pendingMarks() []int }); ok {
			marks = ms.pendingMarks()
		}
		out = make([]float32, 0, (len(marks)+1)*vocab)
	default:
		return nil, fmt.Errorf("forward: logits mode %d", want)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	chunk := max(m.MaxChunk, 1)
	for lo := 0; lo < len(tokens); lo += chunk {
		hi := min(lo+chunk, len(tokens))
		part := tokens[lo:hi]
		mode := want
		if (want == LastLogits || want == LastHidden || want == lastPairs) && hi < len(tokens) {
			mode = NoLogits
		}
		s := seq
		s.Start = seq.Start + lo
		p := m.pass(s, part, mode)
		if want == MarkedLogits {
			p.LogitRows = markRows(marks, s.Start, len(part), hi == len(tokens))
			p.Logits = rowLogits
			if len(p.LogitRows) == 0 {
				p.Logits = NoLogits
			}
		}
		if err := m.net.Forward(p); err != nil {
			return nil, err
		}
		n := 0
		switch p.Logits {
		case AllLogits:
			n = len(part) * vocab
		case rowLogits:
			n = len(p.LogitRows) * vocab
		case LastLogits:
			out, n = make([]float32, 0, vocab), vocab
		case LastHidden:
			out, n = make([]float32, 0, hid), hid
		case lastPairs:
			slots := decoderOf(m.net).pairSlots
			out, n = make([]float32, 0, 2*slots), 2*slots
		case AllHidden:
			n = len(part) * hid
		}
		if n > 0 {
			out = out[:len(out)+n]
			m.Backend.Read(p.Scratch.Logits, 0, out[len(out)-n:])
		}
	}
	return out, nil
}

// ForwardGreedy runs tokens as Forward does and returns the greedy
// successor of the last one (vmath.Argmax's rule over its logits). A
// tensor-parallel rank whose vocabulary-parallel head can pick on its
// slice (PairsArgmax) sums 2·ranks floats over the group where the logits
// took the vocabulary's: every rank of a group must then take this path
// for the same steps, as for any collective. (Not named ForwardArgmax: a
// *Model would then be a session.GreedyRunner, and a wrapper that
// overrides Forward would be bypassed on greedy steps.)
func (m *Model) ForwardGreedy(seq Seq, tokens []int32) (int32, error) {
	if !m.PairsArgmax() {
		logits, err := m.Forward(seq, tokens, LastLogits)
		if err != nil {
			return 0, err
		}
		return vmath.Argmax(logits), nil
	}
	pairs, err := m.Forward(seq, tokens, lastPairs)
	if err != nil {
		return 0, err
	}
	return PickPairs(pairs, m.Config.VocabSize), nil
}

// PairsArgmax reports whether ForwardGreedy picks from the group's argmax
// pairs (a tensor-parallel rank with a vocabulary-parallel head on a
// backend with kernels.ArgmaxOps) rather than from the logits.
func (m *Model) PairsArgmax() bool {
	d := decoderOf(m.net)
	return d != nil && d.pairs != nil
}

// PickPairs is the token of a group's argmax pairs (kernels.ArgmaxOps:
// value, index for each rank's vocabulary slice, in vocabulary order):
// the index of the first pair with the largest value, a NaN value never
// winning, as vmath.Argmax picks over the whole vocabulary. Where no pair
// has a value, or an index is not a token of a vocabulary of vocab ids, it
// is 0.
func PickPairs(pairs []float32, vocab int) int32 {
	best := -1
	for s := 0; 2*s+1 < len(pairs); s++ {
		if v := pairs[2*s]; v == v && (best < 0 || v > pairs[2*best]) { // v == v: not NaN
			best = s
		}
	}
	if best < 0 {
		return 0
	}
	id := pairs[2*best+1]
	if !(id >= 0 && id < float32(vocab)) {
		return 0
	}
	return int32(id)
}

// markRows are the rows of a pass at start of n rows whose logits a
// MarkedLogits forward returns: the row before each mark inside (start,
// start+n], then the last row where the pass is the forward's last.
func markRows(marks []int, start, n int, last bool) []int32 {
	var rows []int32
	for _, p := range marks {
		if p > start && p <= start+n {
			rows = append(rows, int32(p-1-start))
		}
	}
	if last {
		rows = append(rows, int32(n-1))
	}
	return rows
}

func (m *Model) pass(seq Seq, tokens []int32, want Logits) *Pass {
	rows := len(tokens)
	if m.scratch == nil || m.scratch.rows < rows {
		if m.scratch != nil {
			m.moved++
		}
		m.scratch = newScratch(m.Backend, m.Config, max(rows, 1))
		m.scratch.moved = &m.moved
	}
	p := &Pass{Tokens: tokens, Seq: seq, Rows: rows, Logits: want, Scratch: m.scratch,
		Pos: make([]int32, rows), Slots: make([]int32, rows),
		Attn: kernels.AttnSeq{Table: seq.Table, Start: seq.Start}}
	bs := 1
	if seq.Pool != nil {
		bs = seq.Pool.Spec().BlockSize
	}
	for i := range tokens {
		pos := seq.Start + i
		p.Pos[i] = int32(pos)
		if seq.Pool != nil {
			p.Slots[i] = seq.Table[pos/bs]*int32(bs) + int32(pos%bs)
		}
	}
	return p
}

// ScratchGen changes whenever a scratch buffer that an earlier pass used
// is replaced (a pass with more rows, or a buffer grown), and only then: a
// recorded replay of a pass (a CUDA graph holds the buffers' addresses)
// stays valid while it is unchanged. Buffers allocated for the first time
// do not change it.
func (m *Model) ScratchGen() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.moved
}

// ModelConfig returns the checkpoint's hyper-parameters (the scheduler
// reads them through session.Runner, which a worker proxy also implements).
func (m *Model) ModelConfig() *Config { return m.Config }

// KVOps returns the block operations on this model's KV pools.
func (m *Model) KVOps() kernels.KVOps { return m.Backend }
