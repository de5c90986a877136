// Package checkpoint opens a model on disk whatever its format — a
// transformers directory (config.json + safetensors) or a GGUF file — and
// hands back its config, weights and tokenizer location in one value. It
// is the one place that knows which loader serves which path.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/gguf"
	"github.com/pocketllm/pocketllm/models/safetensors"
)

// Checkpoint is an opened model directory or file.
type Checkpoint struct {
	// Name is the model's name: the directory's (or file's) base name.
	Name   string
	Path   string
	Format string // "safetensors" or "gguf"
	Config *models.Config
	Source models.Source
	// GenerationEOS lists extra EOS ids from generation_config.json.
	GenerationEOS []int32
	// GGUF is the opened file for GGUF checkpoints (its metadata holds the
	// tokenizer); nil for safetensors.
	GGUF *gguf.File
}

// Open opens path: a directory with config.json and safetensors, a
// directory with one .gguf, or a .gguf file.
func Open(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(filepath.Clean(path)), ".gguf")
	if !st.IsDir() {
		if strings.HasSuffix(path, ".gguf") {
			return openGGUF(name, path)
		}
		return nil, fmt.Errorf("%s: not a checkpoint directory or .gguf file", path)
	}
	if _, err := os.Stat(filepath.Join(path, "config.json")); errors.Is(err, os.ErrNotExist) {
		ggufs, _ := filepath.Glob(filepath.Join(path, "*.gguf"))
		if len(ggufs) >= 1 {
			return openGGUF(name, ggufs[0])
		}
		return nil, fmt.Errorf("%s: %w and no .gguf file", path, models.ErrNoConfig)
	}
	cfg, err := models.LoadConfig(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	src, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Name: name, Path: path, Format: "safetensors", Config: cfg, Source: src}
	c.GenerationEOS = readGenerationEOS(path)
	return c, nil
}

// Model builds the network on backend be.
func (c *Checkpoint) Model(be kernels.Backend) (*models.Model, error) {
	return models.New(c.Name, c.Config, c.Source, be)
}

// EOS is every end-of-sequence id the checkpoint declares.
func (c *Checkpoint) EOS() []int32 {
	out := c.Config.EOS()
	for _, id := range c.GenerationEOS {
		if !containsID(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Close releases the weights' mapping.
func (c *Checkpoint) Close() error { return c.Source.Close() }

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func readGenerationEOS(dir string) []int32 {
	b, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil
	}
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if json.Unmarshal(b, &g) != nil {
		return nil
	}
	return models.TokenIDs(g.EOS)
}

func openGGUF(name, path string) (*Checkpoint, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	cfg, err := f.Config()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	src, err := f.Source()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Checkpoint{Name: name, Path: path, Format: "gguf", Config: cfg, Source: src, GGUF: f}, nil
}
