package demo

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
)

func TestDeterministic(t *testing.T) {
	a, b := newSource(), newSource()
	for _, n := range a.Names() {
		wa, _ := a.Weight(n)
		wb, _ := b.Weight(n)
		if !bytes.Equal(wa.Data, wb.Data) {
			t.Fatalf("%s differs between two builds", n)
		}
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	tok, err := Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	text := "héllo, wörld\n\x00\xff<|im_end|>"
	ids := tok.Encode(text)
	if got := tok.Decode(ids); got != tok.Decode(tok.Encode(got)) || len(ids) == 0 {
		t.Fatalf("round trip: %q → %v → %q", text, ids, got)
	}
	if ids[len(ids)-1] != IMEnd || ids[0] != 'h' {
		t.Fatalf("ids %v", ids)
	}
	s, err := tok.ApplyChatTemplate([]map[string]string{{"role": "user", "content": "hi"}}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"; s != want {
		t.Fatalf("template: %q, want %q", s, want)
	}
	eos := tok.EOS()
	if len(eos) == 0 {
		t.Fatal("no EOS")
	}
}

// TestGenerates runs the model on the CPU backend and checks that sampled
// output is mostly printable and ends on <|im_end|> within a bound.
func TestGenerates(t *testing.T) {
	ck, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ck.Model(cpu.New(1))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	prompt, _ := tok.ApplyChatTemplate([]map[string]string{{"role": "user", "content": "Tell me a story."}}, true, nil)
	r := rand.New(rand.NewPCG(1, 2))
	printable, total, ended := 0, 0, 0
	for trial := range 8 {
		pool, err := m.Backend.NewKVPool(m.KVSpec(64, 16))
		if err != nil {
			t.Fatal(err)
		}
		table := make([]int32, 64)
		for i := range table {
			table[i] = int32(i)
		}
		ids := tok.Encode(prompt)
		logits, err := m.Forward(models.Seq{Pool: pool, Table: table}, ids, models.LastLogits)
		if err != nil {
			t.Fatal(err)
		}
		var out []int32
		for len(out) < 300 {
			next := sample(logits, 0.8, r)
			if next == IMEnd {
				ended++
				break
			}
			out = append(out, next)
			if next >= 0x20 && next < 0x7f {
				printable++
			}
			total++
			logits, err = m.Forward(models.Seq{Pool: pool, Table: table, Start: len(ids) + len(out) - 1}, []int32{next}, models.LastLogits)
			if err != nil {
				t.Fatal(err)
			}
		}
		if trial < 3 {
			t.Logf("reply %d: %q", trial, tok.Decode(out))
		}
	}
	if float64(printable) < 0.9*float64(total) {
		t.Errorf("only %d of %d tokens printable", printable, total)
	}
	if ended < 4 {
		t.Errorf("only %d of 8 replies ended with <|im_end|>", ended)
	}
}

func sample(logits []float32, temp float64, r *rand.Rand) int32 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	p := make([]float64, len(logits))
	sum := 0.0
	for i, l := range logits {
		p[i] = math.Exp((float64(l) - mx) / temp)
		sum += p[i]
	}
	u := r.Float64() * sum
	for i, x := range p {
		if u -= x; u <= 0 {
			return int32(i)
		}
	}
	return int32(len(p) - 1)
}
