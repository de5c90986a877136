package models

import "github.com/pocketllm/pocketllm/kernels"

// newQwen35 builds Qwen3.5's text model (Qwen3_5ForCausalLM, model_type
// qwen3_5_text): the Gated DeltaNet hybrid with separate q/k/v, z, b and a
// projections, already in the layout the DeltaNet ops read, and a dense
// SwiGLU MLP on every layer. Its multimodal RoPE reduces to plain RoPE
// for text, where all three position streams are equal.
func newQwen35(c *Config, b *binder) (Network, error) {
	project := func(n *DeltaNet, prefix string) {
		sh, hid := n.Shape, c.HiddenSize
		qkv := b.tensor(prefix+"in_proj_qkv.weight", sh.ConvDim(), hid)
		z := b.tensor(prefix+"in_proj_z.weight", sh.VHeads*sh.DV, hid)
		bw := b.tensor(prefix+"in_proj_b.weight", sh.VHeads, hid)
		aw := b.tensor(prefix+"in_proj_a.weight", sh.VHeads, hid)
		n.project = func(p *Pass, in, qkvOut, zOut, aOut, bOut kernels.Buf) {
			be := n.be
			be.MatMul(qkvOut, in, qkv, p.Rows)
			be.MatMul(zOut, in, z, p.Rows)
			be.MatMul(bOut, in, bw, p.Rows)
			be.MatMul(aOut, in, aw, p.Rows)
		}
		n.projectFused = func(p *Pass, fu kernels.FusedOps, x kernels.Buf, norm kernels.Tensor, eps float32,
			qkvOut, zOut, aOut, bOut kernels.Buf) bool {
			return fu.NormMatMul([]kernels.Buf{qkvOut, zOut, bOut, aOut}, x, norm, eps, []kernels.Tensor{qkv, z, bw, aw}, 1)
		}
	}
	ffn := func(_ int, prefix string) FFN { return newMLP(c, b, prefix+"mlp.", c.IntermediateSize) }
	return newHybridDecoder(c, b, project, ffn)
}
