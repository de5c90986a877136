package models

// architectures maps transformers' architecture names to constructors.
// One map, one place: adding an architecture is one line here and one file.
var architectures = map[string]func(*Config, *binder) (Network, error){
	"DeepseekV3ForCausalLM":  newDeepSeekV3,
	"DeepseekV32ForCausalLM": newDeepSeekV32,
	"Glm4MoeForCausalLM":     newGLM4MoE,
	"MiniMaxM2ForCausalLM":   newMiniMaxM2,
	"LlamaForCausalLM":       newLlama,
	"MistralForCausalLM":     newLlama,
	"Qwen3ForCausalLM":       newQwen3,
	"Qwen3MoeForCausalLM":    newQwen3MoE,
	"Qwen3NextForCausalLM":   newQwen3Next,
	"Qwen3_5ForCausalLM":     newQwen35,
}

// Architectures lists the supported architecture names.
func Architectures() []string {
	out := make([]string, 0, len(architectures))
	for name := range architectures {
		out = append(out, name)
	}
	return out
}

// Supported reports whether arch has a constructor.
func Supported(arch string) bool {
	_, ok := architectures[arch]
	return ok
}
