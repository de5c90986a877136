package worker

import (
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/session"
)

// BenchmarkStepOverWorker prices what a greedy decode step pays for
// running in a rank process: the same chain of one-token steps of the
// qwen3 fixture (tiny: the model's own work is small), each fed the token
// the step before chose, in process (Forward and Argmax) and over a
// worker (ForwardArgmax, with the rank's lookahead). The difference per
// step is the worker path's cost, which a GPU step pays as it is.
func BenchmarkStepOverWorker(b *testing.B) {
	m := inProcess(b, "qwen3")
	px := startProxy(b, "qwen3", 1, time.Minute)
	for _, c := range []struct {
		name string
		r    session.Runner
		step func(seq models.Seq, tok []int32) (int32, error)
	}{
		{"inprocess", m, func(seq models.Seq, tok []int32) (int32, error) {
			l, err := m.Forward(seq, tok, models.LastLogits)
			return session.Argmax(l), err
		}},
		{"worker", px, func(seq models.Seq, tok []int32) (int32, error) { return px.ForwardArgmax(seq, tok) }},
	} {
		pool, err := c.r.KVOps().NewKVPool(c.r.KVSpec(64, 16))
		if err != nil {
			b.Fatal(err)
		}
		table := make([]int32, 64)
		for i := range table {
			table[i] = int32(i)
		}
		seq := models.Seq{Pool: pool, Table: table}
		b.Run(c.name, func(b *testing.B) {
			seq.Start, seq.Table = 0, table
			tok, err := c.step(seq, []int32{1, 2, 3, 4, 5, 6, 7, 8})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				seq.Start = 8 + i%1000
				if seq.Start == 8 {
					tok = int32(i % 100) // a fresh chain after the wrap
				}
				// The blocks that cover the step, as the daemon sends them.
				seq.Table = table[:seq.Start/16+1]
				if tok, err = c.step(seq, []int32{tok}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPingOverWorker is the worker path's round trip alone.
func BenchmarkPingOverWorker(b *testing.B) {
	px := startProxy(b, "qwen3", 1, time.Minute)
	for i := 0; i < b.N; i++ {
		if err := px.Ping(); err != nil {
			b.Fatal(err)
		}
	}
}
