package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/pocketllm/pocketllm/daemon"
	"github.com/pocketllm/pocketllm/daemon/gateway"
)

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatReply struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage chatUsage `json:"usage"`
}

func chat(t *testing.T, c *http.Client, url string, body map[string]any, header ...string) chatReply {
	t.Helper()
	status, b := postJSON(t, c, url+"/v1/chat/completions", body, header...)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var r chatReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

// TestStatelessPrefixReuse: a client that resends the whole conversation
// on every turn reuses the first turn's KV through the prefix cache.
func TestStatelessPrefixReuse(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	// A random nonce leads the system text, inside the first KV block, so
	// that no earlier request (another test, or an earlier -count run
	// against the shared daemon) shares a block with this conversation.
	conv := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(fmt.Sprintf("%08x You are a helpful assistant who answers in one short paragraph.", rand.Uint32())),
		openai.UserMessage("What is a prefix cache, and why does it help a chat?"),
	}
	r1, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "demo", Messages: conv, MaxTokens: openai.Int(10), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first turn of a new conversation reports %d cached tokens", r1.Usage.PromptTokensDetails.CachedTokens)
	}
	conv = append(conv, openai.AssistantMessage(r1.Choices[0].Message.Content), openai.UserMessage("And in more detail?"))
	r2, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "demo", Messages: conv, MaxTokens: openai.Int(10), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	const block = daemon.DefaultBlockSize
	p1, cached := r1.Usage.PromptTokens, r2.Usage.PromptTokensDetails.CachedTokens
	want := p1 / block * block // the first turn's prompt up to its last partial block
	if cached < want || cached >= r2.Usage.PromptTokens {
		t.Fatalf("second turn: %d of %d prompt tokens cached; want at least %d (first turn's prompt: %d tokens)", cached, r2.Usage.PromptTokens, want, p1)
	}
	t.Logf("turn 1: %d prompt tokens; turn 2: %d prompt tokens, %d cached", p1, r2.Usage.PromptTokens, cached)
}

// TestNamedSession continues a /v0 session through the chat route.
func TestNamedSession(t *testing.T) {
	d := sharedDaemon(t)
	status, b := postJSON(t, d.unix, "http://pocketd/v0/sessions", map[string]any{"model": "demo"})
	if status != 200 {
		t.Fatalf("create session: %d %s", status, b)
	}
	var sess struct{ ID string }
	json.Unmarshal(b, &sess)

	r1 := chat(t, d.unix, "http://pocketd", map[string]any{"session_id": sess.ID, "max_tokens": 8, "temperature": 0,
		"messages": []any{msg("user", "Remember the word 'pocket'.")}})
	r2 := chat(t, d.unix, "http://pocketd", map[string]any{"max_tokens": 8, "temperature": 0,
		"messages": []any{msg("user", "What was the word?")}}, "X-Pocket-Session", sess.ID)
	total1 := r1.Usage.PromptTokens + r1.Usage.CompletionTokens
	// All of the session's KV is live but its last token's, which was
	// sampled and never run through the model.
	if r2.Usage.PromptTokens <= total1 || r2.Usage.PromptTokensDetails.CachedTokens < total1-1 {
		t.Fatalf("second call: usage %+v; the session held %d tokens before it", r2.Usage, total1)
	}
	status, b = do(t, d.unix, "GET", "http://pocketd/v0/sessions/"+sess.ID, nil)
	var info struct{ Tokens int }
	json.Unmarshal(b, &info)
	if status != 200 || info.Tokens != r2.Usage.PromptTokens+r2.Usage.CompletionTokens {
		t.Fatalf("session now %d tokens (%s), want %d", info.Tokens, b, r2.Usage.PromptTokens+r2.Usage.CompletionTokens)
	}
	// Over TCP without an API key the caller owns no sessions.
	status, b = postJSON(t, d.tcp, d.base+"/v1/chat/completions", map[string]any{"session_id": sess.ID, "messages": []any{msg("user", "hi")}})
	if e := checkError(t, status, b, 404); *e.Error.Code != "session_not_found" {
		t.Fatalf("code %q", *e.Error.Code)
	}
	// A session's model must match the request's.
	status, b = postJSON(t, d.unix, "http://pocketd/v1/chat/completions", map[string]any{"model": "other", "session_id": sess.ID, "messages": []any{msg("user", "hi")}})
	checkError(t, status, b, 400)
}

// TestConcurrentStreams runs 64 streamed requests at once, half on TCP and
// half on the socket, and checks every stream's shape.
func TestConcurrentStreams(t *testing.T) {
	d := sharedDaemon(t)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, base := d.tcp, d.base
			if i%2 == 1 {
				c, base = d.unix, "http://pocketd"
			}
			route, body := "/v1/chat/completions", map[string]any{"model": "demo", "max_tokens": 12, "stream": true,
				"stream_options": map[string]any{"include_usage": true}, "seed": i,
				"messages": []any{msg("user", fmt.Sprintf("request %d", i))}}
			if i%4 == 2 {
				route = "/v1/completions"
				body["prompt"], body["messages"] = fmt.Sprintf("request %d", i), nil
				delete(body, "messages")
			}
			errs <- checkStream(c, base+route, body)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Still serving.
	chat(t, d.tcp, d.base, map[string]any{"max_tokens": 2, "messages": []any{msg("user", "still there?")}})
}

func checkStream(c *http.Client, url string, body map[string]any) error {
	b, _ := json.Marshal(body)
	resp, err := c.Post(url, "application/json", strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return fmt.Errorf("%s: status %d, content type %q", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events, done, err := sseEvents(resp.Body)
	if err != nil {
		return err
	}
	if !done || len(events) < 3 {
		return fmt.Errorf("%s: %d events, [DONE] %v", url, len(events), done)
	}
	id := events[0]["id"]
	finish := 0
	text := ""
	for i, ev := range events {
		if ev["id"] != id {
			return fmt.Errorf("event %d: id %v, want %v", i, ev["id"], id)
		}
		choices, _ := ev["choices"].([]any)
		if i == len(events)-1 {
			u, _ := ev["usage"].(map[string]any)
			if len(choices) != 0 || u == nil || u["completion_tokens"].(float64) < 1 || u["completion_tokens"].(float64) > 12 {
				return fmt.Errorf("last event %v is not a usage chunk", ev)
			}
			continue
		}
		if len(choices) != 1 {
			return fmt.Errorf("event %d: %d choices", i, len(choices))
		}
		ch := choices[0].(map[string]any)
		if ch["finish_reason"] != nil {
			finish++
		}
		if delta, ok := ch["delta"].(map[string]any); ok {
			s, _ := delta["content"].(string)
			text += s
		} else {
			s, _ := ch["text"].(string)
			text += s
		}
	}
	if finish != 1 {
		return fmt.Errorf("%s: %d chunks with a finish_reason", url, finish)
	}
	return nil
}

func TestBadInputs(t *testing.T) {
	d := sharedDaemon(t)
	chatURL, cmplURL := d.base+"/v1/chat/completions", d.base+"/v1/completions"
	for _, tc := range []struct {
		name, method, url, body string
		status                  int
		param                   string
	}{
		{"empty body", "POST", chatURL, ``, 400, ""},
		{"malformed JSON", "POST", chatURL, `{"model":"demo","messages":[`, 400, ""},
		{"not JSON", "POST", chatURL, `hello`, 400, ""},
		{"trailing data", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}]} {}`, 400, ""},
		{"array body", "POST", chatURL, `[]`, 400, ""},
		{"messages wrong type", "POST", chatURL, `{"messages":"hi"}`, 400, "messages"},
		{"max_tokens wrong type", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":"10"}`, 400, "max_tokens"},
		{"max_tokens zero", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens"},
		{"temperature wrong type", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "temperature"},
		{"stream wrong type", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, 400, "stream"},
		{"stop wrong type", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"stop":5}`, 400, "stop"},
		{"stop empty", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"stop":[""]}`, 400, "stop"},
		{"seed fraction", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"seed":1.5}`, 400, "seed"},
		{"stream_options without stream", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"empty messages", "POST", chatURL, `{"model":"demo","messages":[]}`, 400, "messages"},
		{"missing messages", "POST", chatURL, `{"model":"demo"}`, 400, "messages"},
		{"missing role", "POST", chatURL, `{"messages":[{"content":"hi"}]}`, 400, "messages[0].role"},
		{"bad role", "POST", chatURL, `{"messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"content number", "POST", chatURL, `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content"},
		{"image part", "POST", chatURL, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0]"},
		{"invalid UTF-8", "POST", chatURL, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, ""},
		{"unknown model", "POST", chatURL, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model"},
		{"n=0", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"n":0}`, 400, "n"},
		{"n over the cap", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"n":17}`, 400, "n"},
		{"n with a session", "POST", chatURL, `{"messages":[{"role":"user","content":"hi"}],"n":2,"session_id":"s-1"}`, 400, "n"},
		{"wrong method", "GET", chatURL, ``, 405, ""},
		{"prompt missing", "POST", cmplURL, `{"model":"demo"}`, 400, "prompt"},
		{"prompt batch", "POST", cmplURL, `{"prompt":["a","b"]}`, 400, "prompt"},
		{"prompt object", "POST", cmplURL, `{"prompt":{"a":1}}`, 400, "prompt"},
		{"negative token", "POST", cmplURL, `{"prompt":[1,-2]}`, 400, "prompt"},
		{"token outside vocabulary", "POST", cmplURL, `{"prompt":[1,99999]}`, 400, "prompt"},
		{"prompt over context", "POST", cmplURL, `{"prompt":"` + strings.Repeat("ab", 5000) + `"}`, 400, "messages"},
		{"best_of", "POST", cmplURL, `{"prompt":"a","best_of":2}`, 400, "best_of"},
		{"suffix without FIM tokens", "POST", cmplURL, `{"prompt":"a","suffix":"b"}`, 400, "suffix"},
		{"suffix after token ids", "POST", cmplURL, `{"prompt":[1,2],"suffix":"b"}`, 400, "suffix"},
		{"suffix with echo", "POST", cmplURL, `{"prompt":"a","suffix":"b","echo":true}`, 400, "echo"},
		{"tokenize nothing", "POST", d.base + "/tokenize", `{"model":"demo"}`, 400, "prompt"},
		{"detokenize bad id", "POST", d.base + "/detokenize", `{"tokens":[1000000]}`, 400, "tokens"},
	} {
		status, body := do(t, d.tcp, tc.method, tc.url, []byte(tc.body))
		e := checkError(t, status, body, tc.status)
		got := ""
		if e.Error.Param != nil {
			got = *e.Error.Param
		}
		if got != tc.param {
			t.Errorf("%s: param %q, want %q (%s)", tc.name, got, tc.param, body)
		}
	}
	// A body over limits.max_body_bytes (1 MiB here) is refused from its
	// Content-Length, before it is read.
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"messages\":", 2<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	checkError(t, resp.StatusCode, b, 413)

	chat(t, d.tcp, d.base, map[string]any{"max_tokens": 2, "messages": []any{msg("user", "still serving?")}})
}

func TestAPIKeys(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("# pocketd keys\n\nsk-good-1\n  sk-good-2  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOpts{keysFile: keys})
	defer d.stop(t)
	for _, tc := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer nope", 401}, {"sk-good-1", 401}, {"Bearer sk-good-1", 200}, {"Bearer sk-good-2", 200},
		{"x-api-key sk-good-1", 200}, {"x-api-key nope", 401}} {
		var h []string
		if key, ok := strings.CutPrefix(tc.auth, "x-api-key "); ok {
			h = []string{"X-Api-Key", key} // as Anthropic's clients send it
		} else if tc.auth != "" {
			h = []string{"Authorization", tc.auth}
		}
		status, body := do(t, d.tcp, "GET", d.base+"/v1/models", nil, h...)
		if tc.status == 401 {
			checkError(t, status, body, 401)
		} else if status != tc.status {
			t.Errorf("auth %q: %d %s", tc.auth, status, body)
		}
	}
	// The official client with a wrong key gets an authentication error.
	wrong := goClient(d, option.WithAPIKey("wrong"))
	_, err := wrong.Models.List(context.Background())
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 401 || ae.Code != "invalid_api_key" {
		t.Fatalf("wrong key: %v", err)
	}
	// The socket relies on its permissions, not keys; /health is open.
	if status, body := do(t, d.unix, "GET", "http://pocketd/v1/models", nil); status != 200 {
		t.Fatalf("socket: %d %s", status, body)
	}
	if status, body := do(t, d.tcp, "GET", d.base+"/health", nil); status != 200 {
		t.Fatalf("health: %d %s", status, body)
	}
	// A key authenticates as the daemon's own uid: its sessions are reachable.
	status, b := postJSON(t, d.unix, "http://pocketd/v0/sessions", map[string]any{})
	var sess struct{ ID string }
	json.Unmarshal(b, &sess)
	if status != 200 {
		t.Fatalf("create session: %d %s", status, b)
	}
	chat(t, d.tcp, d.base, map[string]any{"session_id": sess.ID, "max_tokens": 2, "messages": []any{msg("user", "hi")}},
		"Authorization", "Bearer sk-good-2")

	// A keys file without keys is refused at start-up.
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	if _, err := gateway.LoadKeys(empty); err == nil {
		t.Fatal("empty keys file accepted")
	}
	if _, err := gateway.LoadKeys(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing keys file accepted")
	}
}

// TestHealthWhileLoading: /health answers 503 until the models are loaded,
// /metrics answers throughout.
func TestHealthWhileLoading(t *testing.T) {
	release := make(chan struct{})
	cpu := daemon.DefaultEngines()["cpu"]
	engines := map[string]daemon.Engine{"cpu": daemon.EngineFunc(func(ctx context.Context, m daemon.ModelConfig) (*daemon.Loaded, error) {
		<-release
		return cpu.Load(ctx, m)
	})}
	d := startDaemon(t, daemonOpts{engines: engines, noWait: true})
	defer d.stop(t)
	status, body := do(t, d.tcp, "GET", d.base+"/health", nil)
	if status != 503 || !strings.Contains(string(body), "loading") {
		t.Fatalf("health while loading: %d %s", status, body)
	}
	if status, body := do(t, d.tcp, "GET", d.base+"/metrics", nil); status != 200 {
		t.Fatalf("metrics while loading: %d %s", status, body)
	}
	close(release)
	<-d.srv.Ready()
	if status, body := do(t, d.tcp, "GET", d.base+"/health", nil); status != 200 {
		t.Fatalf("health when ready: %d %s", status, body)
	}
}

// TestClientDisconnect: a streaming client that goes away stops its
// generation at once, not after max_tokens.
func TestClientDisconnect(t *testing.T) {
	d := sharedDaemon(t)
	mgr := d.srv.Sessions()
	addr := strings.TrimPrefix(d.base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// Greedy decoding of the demo model loops without an end token.
	body := `{"model":"demo","prompt":"The","max_tokens":5000,"temperature":0,"stream":true}`
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	r := bufio.NewReader(conn)
	events := 0
	for events < 20 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	conn.Close()
	atClose := mgr.Stats().CompletionTokens
	deadline := time.Now().Add(20 * time.Second)
	for mgr.Stats().InFlight > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("generation still running %v after the client left", 20*time.Second)
		}
		time.Sleep(time.Millisecond)
	}
	extra := mgr.Stats().CompletionTokens - atClose
	t.Logf("%d tokens generated after the client closed", extra)
	// Writes still succeed until the peer's reset arrives (the demo model
	// makes a token in tens of microseconds, so a few go out); then the
	// failed write stops the generation at its next token.
	if extra > 16 {
		t.Fatalf("%d tokens generated after the client closed", extra)
	}
}

func TestMetrics(t *testing.T) {
	d := sharedDaemon(t)
	chat(t, d.tcp, d.base, map[string]any{"max_tokens": 3, "messages": []any{msg("user", "metrics")}})
	status, b := do(t, d.tcp, "GET", d.base+"/v1/nope", nil)
	checkError(t, status, b, 404)
	status, b = do(t, d.tcp, "GET", d.base+"/metrics", nil)
	if status != 200 {
		t.Fatalf("metrics: %d %s", status, b)
	}
	text := string(b)
	for _, want := range []string{
		`pocketd_http_requests_total{route="/v1/chat/completions",status="200"}`,
		`pocketd_time_to_first_token_seconds_bucket{model="demo",le=`,
		`pocketd_inter_token_latency_seconds_count{model="demo"}`,
		`pocketd_prompt_tokens_total `, `pocketd_cached_prompt_tokens_total `, `pocketd_completion_tokens_total `,
		`pocketd_queue_depth `, `pocketd_kv_blocks{model="demo",state="used"}`, `pocketd_host_tier_bytes{model="demo"}`,
		"# TYPE pocketd_time_to_first_token_seconds histogram",
		`pocketd_history_writes_total `, `pocketd_history_write_seconds_total `,
		`pocketd_state_snapshots{model="demo",where="worker"} 0`, `pocketd_state_snapshot_bytes{model="demo"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The chat ran a prefill and decode steps: both kinds have time.
	for _, kind := range []string{"decode", "prefill"} {
		name := `pocketd_forward_seconds_total{kind="` + kind + `"} `
		_, rest, ok := strings.Cut(text, name)
		v, err := strconv.ParseFloat(strings.Fields(rest + " x")[0], 64)
		if !ok || err != nil || v <= 0 {
			t.Errorf("%s: %q (%v)", name, strings.Fields(rest + " x")[0], err)
		}
	}
}

func TestTokenize(t *testing.T) {
	d := sharedDaemon(t)
	status, b := postJSON(t, d.tcp, d.base+"/tokenize", map[string]any{"model": "demo", "prompt": "héllo"})
	var tok struct {
		Tokens []int32 `json:"tokens"`
		Count  int     `json:"count"`
	}
	json.Unmarshal(b, &tok)
	if status != 200 || len(tok.Tokens) != 6 || tok.Count != 6 { // byte-level: é is two bytes
		t.Fatalf("tokenize: %d %s", status, b)
	}
	status, b = postJSON(t, d.tcp, d.base+"/detokenize", map[string]any{"model": "demo", "tokens": tok.Tokens})
	var detok struct{ Prompt string }
	json.Unmarshal(b, &detok)
	if status != 200 || detok.Prompt != "héllo" {
		t.Fatalf("detokenize: %d %s", status, b)
	}
	// Messages render with the chat template, as the chat route does.
	status, b = postJSON(t, d.unix, "http://pocketd/tokenize", map[string]any{"messages": []any{msg("user", "hi")}})
	json.Unmarshal(b, &tok)
	r := chat(t, d.unix, "http://pocketd", map[string]any{"max_tokens": 1, "messages": []any{msg("user", "hi")}})
	if status != 200 || tok.Count != r.Usage.PromptTokens {
		t.Fatalf("tokenize messages: %d %s; chat prompt %d tokens", status, b, r.Usage.PromptTokens)
	}
}
