// Package kvseq gives the command-line tools' benchmarks and checks a
// sequence with a KV pool of its own.
package kvseq

import "github.com/pocketllm/pocketllm/models"

// Private gives one sequence a private KV pool covering n tokens (at
// least one block) in blocks of blockSize; reverse lays its block table
// out backwards, to exercise the block-table indexing.
func Private(m *models.Model, n, blockSize int, reverse bool) (models.Seq, error) {
	return PrivateHalf(m, n, blockSize, reverse, false)
}

// PrivateHalf is Private with a float16 pool where half is set and the
// backend offers one (kernels.KVSpec.Half).
func PrivateHalf(m *models.Model, n, blockSize int, reverse, half bool) (models.Seq, error) {
	blocks := max((n+blockSize-1)/blockSize, 1)
	spec := m.KVSpec(blocks, blockSize)
	spec.Half = half
	pool, err := m.Backend.NewKVPool(spec)
	if err != nil {
		return models.Seq{}, err
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
		if reverse {
			table[i] = int32(blocks - 1 - i)
		}
	}
	return models.Seq{Pool: pool, Table: table, State: m.NewState()}, nil
}

// Greedy decodes n tokens after toks with the model alone, on a private
// pool: the cold reference that every session, worker and tensor-parallel
// path is checked against. Ties go to the lowest id, as session.Argmax.
func Greedy(m *models.Model, toks []int32, n int) ([]int32, error) {
	seq, err := Private(m, len(toks)+n, 16, false)
	if err != nil {
		return nil, err
	}
	logits, err := m.Forward(seq, toks, models.LastLogits)
	if err != nil {
		return nil, err
	}
	out := make([]int32, 0, n)
	for range n {
		best := int32(0)
		for i, v := range logits {
			if v > logits[best] {
				best = int32(i)
			}
		}
		out = append(out, best)
		seq.Start = len(toks) + len(out) - 1
		if logits, err = m.Forward(seq, []int32{best}, models.LastLogits); err != nil {
			return nil, err
		}
	}
	return out, nil
}
