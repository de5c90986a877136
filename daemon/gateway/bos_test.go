package gateway_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/models/demo"
	"github.com/pocketllm/pocketllm/models/tokenizer"
)

// TestCompletionPromptBOS serves the demo model with a Llama-class
// tokenizer config, whose encoder puts a BOS (<|endoftext|> here) before
// a text: a completion prompt of its own gets it, as does the text that
// starts a session; text that continues a session does not.
func TestCompletionPromptBOS(t *testing.T) {
	var cfg map[string]any
	json.Unmarshal(demo.TokenizerConfigJSON(), &cfg)
	cfg["bos_token"], cfg["tokenizer_class"] = "<|endoftext|>", "LlamaTokenizerFast"
	cfgJSON, _ := json.Marshal(cfg)
	tok, err := tokenizer.New(demo.TokenizerJSON(), cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	cpu := daemon.DefaultEngines()["cpu"]
	engines := map[string]daemon.Engine{"cpu": daemon.EngineFunc(func(ctx context.Context, m daemon.ModelConfig) (*daemon.Loaded, error) {
		l, err := cpu.Load(ctx, m)
		if err == nil {
			l.Tokenizer = tok
		}
		return l, err
	})}
	d := startDaemon(t, daemonOpts{engines: engines})
	defer d.stop(t)
	type usage struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	complete := func(body map[string]any) usage {
		t.Helper()
		body["max_tokens"], body["temperature"] = 1, 0
		status, b := postJSON(t, d.unix, "http://pocketd/v1/completions", body)
		if status != 200 {
			t.Fatalf("%v: %d %s", body, status, b)
		}
		var u usage
		json.Unmarshal(b, &u)
		return u
	}
	if u := complete(map[string]any{"model": "demo", "prompt": "Hi"}); u.Usage.PromptTokens != 3 {
		t.Errorf("a prompt of its own: %d prompt tokens, want BOS + 2", u.Usage.PromptTokens)
	}
	if u := complete(map[string]any{"model": "demo", "prompt": "Hi", "echo": true}); u.Usage.PromptTokens != 2 {
		t.Errorf("an echoed prompt: %d prompt tokens, want its 2 bytes", u.Usage.PromptTokens)
	}
	for _, c := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"model": "demo", "prompt": "Hi"}, 3},
		{map[string]any{"model": "demo", "prompt": "Hi", "add_special_tokens": false}, 2},
		{map[string]any{"model": "demo", "messages": []any{msg("user", "Hi")}, "add_generation_prompt": false}, len(tok.Encode("<|im_start|>user\nHi<|im_end|>\n"))},
	} {
		status, b := postJSON(t, d.unix, "http://pocketd/tokenize", c.body)
		var r struct{ Count int }
		json.Unmarshal(b, &r)
		if status != 200 || r.Count != c.want {
			t.Errorf("tokenize %v: %d %s, want %d tokens", c.body, status, b, c.want)
		}
	}
	status, b := postJSON(t, d.unix, "http://pocketd/v0/sessions", map[string]any{"model": "demo"})
	if status != 200 {
		t.Fatalf("create session: %d %s", status, b)
	}
	var sess struct{ ID string }
	json.Unmarshal(b, &sess)
	first := complete(map[string]any{"session_id": sess.ID, "prompt": "Hi"})
	if first.Usage.PromptTokens != 3 {
		t.Errorf("a session's first text: %d prompt tokens, want BOS + 2", first.Usage.PromptTokens)
	}
	held := first.Usage.PromptTokens + first.Usage.CompletionTokens
	if u := complete(map[string]any{"session_id": sess.ID, "prompt": "!"}); u.Usage.PromptTokens != held+1 {
		t.Errorf("more of the session's text: %d prompt tokens, want the %d held + 1", u.Usage.PromptTokens, held)
	}
}
