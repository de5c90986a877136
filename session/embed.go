package session

import (
	"context"
	"fmt"
	"math"

	"github.com/pocketllm/pocketllm/models"
)

// Embeddings: a prompt's final hidden states (after the final norm, where
// the LM head would start) pooled to one vector, as embedding checkpoints
// of decoder models (Qwen3-Embedding: the last token's, normalized) are
// used. The stateless OpenAI route /v1/embeddings calls Embed.

// Pooling is how Embed reduces a prompt's final hidden states.
type Pooling string

const (
	// PoolLast takes the last token's hidden state (Qwen3-Embedding and
	// other decoder embedding models; the default).
	PoolLast Pooling = "last"
	// PoolMean averages every token's.
	PoolMean Pooling = "mean"
)

// ParsePooling reads a pooling name; "" is the model's default.
func ParsePooling(s string) (Pooling, error) {
	switch p := Pooling(s); p {
	case "", PoolLast, PoolMean:
		return p, nil
	}
	return "", fmt.Errorf("%w: pooling %q is not last or mean", ErrBadRequest, s)
}

// embedChunk is the tokens of one scheduler job of Embed: other
// sequences' decode steps run between them.
var embedChunk = 512

// Embed runs prompt through model on an ephemeral sequence and returns
// its final hidden states pooled (pool "": the model's default) and
// scaled to unit length. The whole prompt is computed: its hidden states
// are not kept by the prefix cache, whose blocks hold only K and V.
func (m *Manager) Embed(ctx context.Context, owner Owner, model string, prompt []int32, pool Pooling) ([]float32, error) {
	if err := m.begin(); err != nil {
		return nil, err
	}
	defer m.end()
	e, err := m.engine(model)
	if err != nil {
		return nil, err
	}
	if pool == "" {
		pool = e.pooling
	}
	if pool == "" {
		pool = PoolLast
	}
	if pool != PoolLast && pool != PoolMean {
		return nil, fmt.Errorf("%w: pooling %q is not last or mean", ErrBadRequest, pool)
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: nothing to embed", ErrBadRequest)
	}
	if err := e.checkTokens(prompt); err != nil {
		return nil, err
	}
	if len(prompt) > e.ctxLen {
		return nil, fmt.Errorf("%w: %d tokens, model %s allows %d", ErrContextLength, len(prompt), e.name, e.ctxLen)
	}
	sq, done, err := e.ephemeral(owner)
	if err != nil {
		return nil, err
	}
	defer done()
	H := e.model.ModelConfig().HiddenSize
	sum := make([]float64, H)
	for lo := 0; lo < len(prompt); lo += embedChunk {
		hi := min(lo+embedChunk, len(prompt))
		want := models.AllHidden
		if pool == PoolLast {
			want = models.NoLogits
			if hi == len(prompt) {
				want = models.LastHidden
			}
		}
		var hidden []float32
		err := e.submit(ctx, func() (err error) {
			hidden, err = e.forward(sq, prompt, hi, want, passMarks{})
			return err
		})
		if err != nil {
			return nil, err
		}
		m.prefilled.Add(int64(hi - lo))
		if want == models.NoLogits {
			continue
		}
		if len(hidden)%H != 0 || len(hidden) == 0 {
			return nil, fmt.Errorf("embed: %d hidden values, not rows of %d", len(hidden), H)
		}
		for i, v := range hidden {
			sum[i%H] += float64(v)
		}
	}
	var norm float64
	for _, v := range sum {
		norm += v * v
	}
	out := make([]float32, H)
	if norm = math.Sqrt(norm); norm > 0 {
		for i, v := range sum {
			out[i] = float32(v / norm) // the mean's length is irrelevant once normalized
		}
	}
	return out, nil
}
