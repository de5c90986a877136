package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Config holds the hyper-parameters of a checkpoint, parsed from
// transformers' config.json (or mapped from GGUF metadata). One struct
// serves every architecture: fields an architecture does not use stay zero.
type Config struct {
	Architectures []string `json:"architectures"`
	ModelType     string   `json:"model_type"`

	VocabSize        int     `json:"vocab_size"`
	HiddenSize       int     `json:"hidden_size"`
	IntermediateSize int     `json:"intermediate_size"`
	NumLayers        int     `json:"num_hidden_layers"`
	NumHeads         int     `json:"num_attention_heads"`
	NumKVHeads       int     `json:"num_key_value_heads"`
	HeadDim          int     `json:"head_dim"`
	RMSNormEps       float64 `json:"rms_norm_eps"`
	MaxPositions     int     `json:"max_position_embeddings"`
	TieEmbeddings    bool    `json:"tie_word_embeddings"`
	AttentionBias    bool    `json:"attention_bias"`
	HiddenAct        string  `json:"hidden_act"`

	RopeTheta           float64         `json:"rope_theta"`
	RopeScaling         *RopeScaling    `json:"rope_scaling"`
	RopeParameters      *RopeParameters `json:"rope_parameters"`
	PartialRotaryFactor float64         `json:"partial_rotary_factor"`
	RotaryDim           int             `json:"rotary_dim"`
	RopeInterleave      bool            `json:"rope_interleave"`

	BOSTokenID json.RawMessage `json:"bos_token_id"`
	EOSTokenID json.RawMessage `json:"eos_token_id"`

	// Mixture of experts.
	NumExperts          int     `json:"num_experts"`
	NumLocalExperts     int     `json:"num_local_experts"`
	NRoutedExperts      int     `json:"n_routed_experts"`
	NumExpertsPerTok    int     `json:"num_experts_per_tok"`
	MoEIntermediateSize int     `json:"moe_intermediate_size"`
	NormTopKProb        bool    `json:"norm_topk_prob"`
	DecoderSparseStep   int     `json:"decoder_sparse_step"`
	MLPOnlyLayers       []int   `json:"mlp_only_layers"`
	NSharedExperts      int     `json:"n_shared_experts"`
	SharedExpertSize    int     `json:"shared_expert_intermediate_size"`
	NGroup              int     `json:"n_group"`
	TopKGroup           int     `json:"topk_group"`
	RoutedScalingFactor float64 `json:"routed_scaling_factor"`
	FirstKDenseReplace  int     `json:"first_k_dense_replace"`
	ScoringFunc         string  `json:"scoring_func"`
	UseQKNorm           bool    `json:"use_qk_norm"`
	QKNormType          string  `json:"qk_norm_type"`
	// MLPLayerTypes says "dense" or "sparse" per layer (DeepSeek-V3.2).
	MLPLayerTypes []string `json:"mlp_layer_types"`

	// Multi-head latent attention (DeepSeek).
	QLoraRank     int `json:"q_lora_rank"`
	KVLoraRank    int `json:"kv_lora_rank"`
	QKNopeHeadDim int `json:"qk_nope_head_dim"`
	QKRopeHeadDim int `json:"qk_rope_head_dim"`
	VHeadDim      int `json:"v_head_dim"`
	IndexHeadDim  int `json:"index_head_dim"`
	IndexNHeads   int `json:"index_n_heads"`
	IndexTopK     int `json:"index_topk"`

	// Hybrid linear attention (Gated DeltaNet).
	LayerTypes            []string `json:"layer_types"`
	FullAttentionInterval int      `json:"full_attention_interval"`
	LinearConvKernelDim   int      `json:"linear_conv_kernel_dim"`
	LinearKeyHeadDim      int      `json:"linear_key_head_dim"`
	LinearNumKeyHeads     int      `json:"linear_num_key_heads"`
	LinearNumValueHeads   int      `json:"linear_num_value_heads"`
	LinearValueHeadDim    int      `json:"linear_value_head_dim"`

	Quantization *QuantConfig `json:"quantization_config"`

	// TextConfig is set by multimodal wrappers (Qwen3.5); LoadConfig
	// flattens it into the top level.
	TextConfig *Config `json:"text_config"`
}

// RopeScaling is the legacy rope_scaling object.
type RopeScaling struct {
	Type                          string  `json:"type"`
	RopeType                      string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
	BetaFast                      float64 `json:"beta_fast"`
	BetaSlow                      float64 `json:"beta_slow"`
	MScale                        float64 `json:"mscale"`
	MScaleAllDim                  float64 `json:"mscale_all_dim"`
}

// RopeParameters is transformers 5's rope_parameters object.
type RopeParameters struct {
	RopeScaling
	RopeTheta           float64 `json:"rope_theta"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
}

// QuantConfig is quantization_config for FP8 block-scaled checkpoints.
type QuantConfig struct {
	QuantMethod     string `json:"quant_method"`
	Fmt             string `json:"fmt"`
	WeightBlockSize []int  `json:"weight_block_size"`
}

// ErrNoConfig means the directory has no config.json.
var ErrNoConfig = errors.New("no config.json")

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoConfig)
	}
	if err != nil {
		return nil, err
	}
	return ParseConfig(b)
}

// ParseConfig decodes config.json bytes, resolves aliases and checks the
// values every architecture relies on.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if c.TextConfig != nil {
		tc := *c.TextConfig
		if len(tc.Architectures) == 0 {
			tc.Architectures = c.Architectures
		}
		if tc.Quantization == nil {
			tc.Quantization = c.Quantization
		}
		c = tc
	}
	c.normalize()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return &c, nil
}

func (c *Config) normalize() {
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if p := c.RopeParameters; p != nil {
		if p.RopeTheta != 0 {
			c.RopeTheta = p.RopeTheta
		}
		if p.PartialRotaryFactor != 0 {
			c.PartialRotaryFactor = p.PartialRotaryFactor
		}
		if c.RopeScaling == nil && (p.RopeType != "" && p.RopeType != "default" || p.Type != "") {
			rs := p.RopeScaling
			c.RopeScaling = &rs
		}
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.NumExperts == 0 {
		c.NumExperts = max(c.NumLocalExperts, c.NRoutedExperts)
	}
}

func (c *Config) validate() error {
	pos := map[string]int{
		"vocab_size": c.VocabSize, "hidden_size": c.HiddenSize,
		"num_hidden_layers": c.NumLayers, "num_attention_heads": c.NumHeads,
	}
	for k, v := range pos {
		if v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", k, v)
		}
	}
	const limit = 1 << 24
	for k, v := range map[string]int{"vocab_size": c.VocabSize, "hidden_size": c.HiddenSize,
		"intermediate_size": c.IntermediateSize, "num_hidden_layers": c.NumLayers,
		"num_attention_heads": c.NumHeads, "num_key_value_heads": c.NumKVHeads, "head_dim": c.HeadDim,
		"num_experts": c.NumExperts, "num_experts_per_tok": c.NumExpertsPerTok} {
		if v < 0 || v > limit {
			return fmt.Errorf("%s out of range: %d", k, v)
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.NumExpertsPerTok > c.NumExperts && c.NumExperts > 0 {
		return fmt.Errorf("num_experts_per_tok %d > experts %d", c.NumExpertsPerTok, c.NumExperts)
	}
	if math.IsNaN(c.RMSNormEps) || c.RMSNormEps < 0 {
		return fmt.Errorf("bad rms_norm_eps %v", c.RMSNormEps)
	}
	return nil
}

// Arch is the architecture name used by the registry: the first entry of
// "architectures", or model_type when that is missing.
func (c *Config) Arch() string {
	if len(c.Architectures) > 0 {
		return c.Architectures[0]
	}
	return c.ModelType
}

// TokenIDs decodes bos/eos fields, which config.json writes as an int, a
// list or null.
func TokenIDs(raw json.RawMessage) []int32 {
	if len(raw) == 0 {
		return nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}
	}
	var many []int32
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

// EOS lists the end-of-sequence ids of config.json.
func (c *Config) EOS() []int32 { return TokenIDs(c.EOSTokenID) }

// RopeInvFreq returns the rotary inverse frequencies for rotary width dim,
// applying the llama3 scaling rule when rope_scaling asks for it.
func (c *Config) RopeInvFreq(dim int) []float32 {
	inv := make([]float64, dim/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(dim))
	}
	if s := c.RopeScaling; s != nil {
		typ := s.RopeType
		if typ == "" {
			typ = s.Type
		}
		switch typ {
		case "llama3":
			lowWave := float64(s.OriginalMaxPositionEmbeddings) / s.LowFreqFactor
			highWave := float64(s.OriginalMaxPositionEmbeddings) / s.HighFreqFactor
			for i, f := range inv {
				wave := 2 * math.Pi / f
				switch {
				case wave > lowWave:
					inv[i] = f / s.Factor
				case wave >= highWave:
					smooth := (float64(s.OriginalMaxPositionEmbeddings)/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
					inv[i] = (1-smooth)*f/s.Factor + smooth*f
				}
			}
		case "linear":
			for i := range inv {
				inv[i] /= s.Factor
			}
		}
	}
	out := make([]float32, len(inv))
	for i, f := range inv {
		out[i] = float32(f)
	}
	return out
}
