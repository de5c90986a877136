// Package kvseq gives the command-line tools' benchmarks and checks a
// sequence with a KV pool of its own.
package kvseq

import "github.com/pocketllm/pocketllm/models"

// Private gives one sequence a private KV pool covering n tokens (at
// least one block) in blocks of blockSize; reverse lays its block table
// out backwards, to exercise the block-table indexing.
func Private(m *models.Model, n, blockSize int, reverse bool) (models.Seq, error) {
	blocks := max((n+blockSize-1)/blockSize, 1)
	pool, err := m.Backend.NewKVPool(m.KVSpec(blocks, blockSize))
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
