package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
)

func f64(v float64) *float64 { return &v }
func intp(v int) *int        { return &v }

// do sends a raw request over the socket and decodes the JSON reply.
func do(t *testing.T, hc *http.Client, method, url, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, url, res.StatusCode, b, err)
		}
	}
	return res.StatusCode
}

func TestAPIRoundTrip(t *testing.T) {
	ts := startServer(t, DemoModel(), fixtureModel("qwen3"))
	hc := unixHTTP(ts.sock)
	const base = "http://pocketd"

	var h apitype.Health
	if st := do(t, hc, "GET", base+"/v0/health", "", &h); st != 200 || h.Status != "ok" || len(h.Models) != 2 {
		t.Fatalf("health %d %+v", st, h)
	}
	var ms apitype.Models
	do(t, hc, "GET", base+"/v0/models", "", &ms)
	if len(ms.Models) != 2 || ms.Models[0].Name != "demo" || !ms.Models[0].ChatTemplate || ms.Models[1].Name != "qwen3" || ms.Models[1].Tokenizer {
		t.Fatalf("models %+v", ms)
	}

	var s apitype.Session
	if st := do(t, hc, "POST", base+"/v0/sessions", `{"model":"demo"}`, &s); st != 200 || s.ID == "" || s.Model != "demo" {
		t.Fatalf("create %d %+v", st, s)
	}
	sp := base + "/v0/sessions/" + s.ID
	var ar apitype.AppendResult
	if st := do(t, hc, "POST", sp+"/append", `{"messages":[{"role":"user","content":"Hello!"}]}`, &ar); st != 200 || ar.Tokens == 0 || ar.Prefilled != ar.Tokens {
		t.Fatalf("append %d %+v", st, ar)
	}
	prompt := ar.Tokens
	var gr apitype.GenerateResult
	if st := do(t, hc, "POST", sp+"/generate", `{"max_tokens":8,"temperature":0}`, &gr); st != 200 || len(gr.IDs) == 0 || gr.Usage.PromptTokens != prompt {
		t.Fatalf("generate %d %+v", st, gr)
	}

	// NDJSON stream: one line per token, then the result.
	req, _ := http.NewRequest("POST", sp+"/generate", strings.NewReader(`{"max_tokens":12,"temperature":0.8,"seed":7,"stream":true,"logprobs":true}`))
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("stream %d %s", res.StatusCode, ct)
	}
	var streamed []int32
	var text strings.Builder
	var final *apitype.GenerateResult
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var line apitype.StreamLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		if final != nil {
			t.Fatal("line after the result")
		}
		switch {
		case line.ID != nil:
			if line.Logprob == nil || *line.Logprob > 0 {
				t.Fatalf("token line without logprob: %s", sc.Bytes())
			}
			streamed = append(streamed, *line.ID)
			text.WriteString(line.Text)
		case line.Done:
			final = &apitype.GenerateResult{IDs: line.IDs, Text: line.Text, FinishReason: line.FinishReason}
		default:
			t.Fatalf("unexpected line %s", sc.Bytes())
		}
	}
	res.Body.Close()
	if final == nil || !slices.Equal(streamed, final.IDs) || text.String() != final.Text {
		t.Fatalf("streamed %v %q, result %+v", streamed, text.String(), final)
	}

	var toks apitype.Tokens
	do(t, hc, "GET", sp+"/tokens", "", &toks)
	if len(toks.Tokens) != prompt+len(gr.IDs)+len(final.IDs) || !slices.Equal(toks.Tokens[prompt:prompt+len(gr.IDs)], gr.IDs) {
		t.Fatalf("session tokens %v", toks.Tokens)
	}
	var info apitype.Session
	do(t, hc, "GET", sp, "", &info)
	if info.Tokens != len(toks.Tokens) {
		t.Fatalf("info %+v", info)
	}

	var fork apitype.Session
	if st := do(t, hc, "POST", sp+"/fork", `{"at":3}`, &fork); st != 200 || fork.Tokens != 3 || fork.ID == s.ID {
		t.Fatalf("fork %d %+v", st, fork)
	}
	var tr apitype.Session
	if st := do(t, hc, "POST", sp+"/truncate", `{"length":2}`, &tr); st != 200 || tr.Tokens != 2 {
		t.Fatalf("truncate %d %+v", st, tr)
	}
	var list apitype.Sessions
	do(t, hc, "GET", base+"/v0/sessions", "", &list)
	if len(list.Sessions) != 2 {
		t.Fatalf("list %+v", list)
	}
	if st := do(t, hc, "DELETE", sp, "", nil); st != 200 {
		t.Fatalf("delete %d", st)
	}

	// Errors: status and an OpenAI-shaped body with a message.
	for _, tc := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"GET", sp, "", 404, "not found"},
		{"POST", sp + "/append", `{"text":"x"}`, 404, "not found"},
		{"POST", base + "/v0/sessions", `{"model":"nope"}`, 404, "unknown model"},
		{"POST", base + "/v0/sessions", `{"model":`, 400, "JSON"},
		{"POST", base + "/v0/sessions", `{}`, 400, "model"},
		{"PUT", base + "/v0/sessions", ``, 405, "not allowed"},
		{"GET", base + "/v0/nothing", ``, 404, "no route"},
		{"GET", sp + "/bogus", ``, 404, "no route"},
	} {
		var eb apitype.ErrorBody
		if st := do(t, hc, tc.method, tc.path, tc.body, &eb); st != tc.status || !strings.Contains(eb.Error.Message, tc.msg) || eb.Error.Type == "" {
			t.Errorf("%s %s %s: %d %+v, want %d %q", tc.method, tc.path, tc.body, st, eb, tc.status, tc.msg)
		}
	}

	// The fixture has no tokenizer: tokens work, text is a 400.
	var q apitype.Session
	do(t, hc, "POST", base+"/v0/sessions", `{"model":"qwen3"}`, &q)
	var eb apitype.ErrorBody
	if st := do(t, hc, "POST", base+"/v0/sessions/"+q.ID+"/append", `{"text":"hi"}`, &eb); st != 400 {
		t.Errorf("text on a tokenizer-less model: %d %+v", st, eb)
	}
	if st := do(t, hc, "POST", base+"/v0/sessions/"+q.ID+"/append", `{"tokens":[1,2,3]}`, &ar); st != 200 || ar.Tokens != 3 {
		t.Errorf("tokens: %d %+v", st, ar)
	}
	if st := do(t, hc, "POST", base+"/v0/sessions/"+q.ID+"/append", `{"tokens":[100000]}`, &eb); st != 400 {
		t.Errorf("out-of-vocabulary token: %d %+v", st, eb)
	}

	// TCP: /health is there, /v0 is not.
	tcp := &http.Client{}
	if st := do(t, tcp, "GET", "http://"+ts.http+"/health", "", &h); st != 200 || h.Status != "ok" {
		t.Errorf("tcp health %d", st)
	}
	if st := do(t, tcp, "GET", "http://"+ts.http+"/v0/sessions", "", nil); st != 404 {
		t.Errorf("tcp /v0: %d", st)
	}
}

func TestClientTypedErrors(t *testing.T) {
	ts := startServer(t, DemoModel())
	c := ts.client()
	ctx := context.Background()
	_, err := c.Session(ctx, "nope")
	var ce *client.Error
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ce) || ce.Status != 404 || ce.Type != "not_found_error" {
		t.Fatalf("not found: %v", err)
	}
	s, err := c.NewSession(ctx, "") // the only model is the default
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Truncate(ctx, s.ID, 5); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("truncate past the end: %v", err)
	}
	if _, err := c.Generate(ctx, s.ID, apitype.Generate{Temperature: f64(-1)}, nil); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("bad temperature: %v", err)
	}
	bad := &client.Client{Socket: ts.sock + ".nope", StartWait: 100 * time.Millisecond}
	if _, err := bad.Health(ctx); !errors.Is(err, client.ErrNoDaemon) {
		t.Fatalf("no daemon: %v", err)
	}
	var zero client.Client // the zero value finds the socket through the environment
	t.Setenv("POCKETD_SOCKET", ts.sock)
	if h, err := zero.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("zero client: %v", err)
	}
}

// TestStreamDisconnectStopsGeneration: a client that goes away mid-stream
// stops the generation (the session keeps what was generated, far less
// than asked).
func TestStreamDisconnectStopsGeneration(t *testing.T) {
	ts := startServer(t, DemoModel())
	c := ts.client()
	ctx := context.Background()
	s, _ := c.NewSession(ctx, "demo")
	c.AppendText(ctx, s.ID, "Once upon a time")
	errStop := errors.New("enough")
	n := 0
	_, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(5000), Temperature: f64(0)}, func(apitype.Token) error {
		if n++; n == 3 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatal(err)
	}
	// The generation ends soon after; the session lock is free again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.AppendTokens(tctx, s.ID, []int32{'x'})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation still running: %v", err)
		}
	}
	info, _ := c.Session(ctx, s.ID)
	if info.Tokens > 16+1000 {
		t.Fatalf("generation did not stop: %d tokens", info.Tokens)
	}
	t.Logf("session holds %d tokens after the disconnect", info.Tokens)
}

// TestConcurrentClients: 32 clients × 4 sessions, all at once. Every
// stream must match its result, every session must hold exactly its own
// prompt and tokens, and greedy output must equal a serial reference.
func TestConcurrentClients(t *testing.T) {
	ts := startServer(t, DemoModel())
	ctx := context.Background()
	prompts := []string{"The cat", "A dog ran", "Hello there, ", "Numbers: 1 2 3"}
	want := map[string][]int32{}
	ref := ts.client()
	for _, p := range prompts {
		s, err := ref.NewSession(ctx, "demo")
		if err != nil {
			t.Fatal(err)
		}
		ref.AppendText(ctx, s.ID, p)
		r, err := ref.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(12), Temperature: f64(0)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = r.IDs
	}
	const clients, perClient = 32, 4
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ts.client()
			var inner sync.WaitGroup
			for si := range perClient {
				inner.Add(1)
				go func() {
					defer inner.Done()
					p := prompts[(ci+si)%len(prompts)]
					if err := oneSession(ctx, c, p, want[p]); err != nil {
						errs <- fmt.Errorf("client %d session %d: %w", ci, si, err)
					}
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func oneSession(ctx context.Context, c *client.Client, prompt string, want []int32) error {
	s, err := c.NewSession(ctx, "demo")
	if err != nil {
		return err
	}
	ar, err := c.AppendText(ctx, s.ID, prompt)
	if err != nil {
		return err
	}
	before, err := c.Tokens(ctx, s.ID)
	if err != nil {
		return err
	}
	var streamed []int32
	res, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(12), Temperature: f64(0)}, func(tk apitype.Token) error {
		streamed = append(streamed, tk.ID)
		return nil
	})
	if err != nil {
		return err
	}
	if !slices.Equal(streamed, res.IDs) {
		return fmt.Errorf("streamed %v, result %v", streamed, res.IDs)
	}
	if !slices.Equal(res.IDs, want) {
		return fmt.Errorf("generated %v, serial reference %v", res.IDs, want)
	}
	after, err := c.Tokens(ctx, s.ID)
	if err != nil {
		return err
	}
	if len(before) != ar.Tokens || !slices.Equal(after, append(before, res.IDs...)) {
		return fmt.Errorf("session holds %v, want %v + %v", after, before, res.IDs)
	}
	return c.DeleteSession(ctx, s.ID)
}

// TestOtherUIDSeesNothing runs curl as nobody against root's session:
// every route answers 404 and the list is empty.
func TestOtherUIDSeesNothing(t *testing.T) {
	if syscall.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	ts := startServer(t, DemoModel())
	ctx := context.Background()
	c := ts.client()
	s, _ := c.NewSession(ctx, "demo")
	c.AppendText(ctx, s.ID, "secret")
	asNobody := func(method, path, body string) (int, string) {
		args := []string{"-s", "--unix-socket", ts.sock, "-X", method, "-w", "\n%{http_code}", "http://pocketd" + path}
		if body != "" {
			args = append(args, "-d", body)
		}
		cmd := exec.Command(curl, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as nobody: %v", err)
		}
		body, code, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		var st int
		fmt.Sscan(code, &st)
		return st, body
	}
	p := "/v0/sessions/" + s.ID
	for _, tc := range [][3]string{
		{"GET", p, ""}, {"GET", p + "/tokens", ""}, {"POST", p + "/append", `{"text":"x"}`},
		{"POST", p + "/generate", `{"max_tokens":2}`}, {"POST", p + "/generate", `{"max_tokens":2,"stream":true}`},
		{"POST", p + "/fork", `{}`}, {"POST", p + "/truncate", `{"length":0}`}, {"DELETE", p, ""},
	} {
		if st, body := asNobody(tc[0], tc[1], tc[2]); st != 404 || !strings.Contains(body, "not_found_error") {
			t.Errorf("nobody %s %s: %d %s", tc[0], tc[1], st, body)
		}
	}
	if st, body := asNobody("GET", "/v0/sessions", ""); st != 200 || !strings.Contains(body, `"sessions":[]`) {
		t.Errorf("nobody's list: %d %s", st, body)
	}
	// Nobody's own session works, and root does not see it.
	st, body := asNobody("POST", "/v0/sessions", `{"model":"demo"}`)
	var ns apitype.Session
	if st != 200 || json.Unmarshal([]byte(body), &ns) != nil {
		t.Fatalf("nobody creates: %d %s", st, body)
	}
	if _, err := c.Session(ctx, ns.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("root sees nobody's session: %v", err)
	}
	// Root's session is intact.
	if info, err := c.Session(ctx, s.ID); err != nil || info.Tokens != len("secret") {
		t.Errorf("root's session after nobody's attempts: %+v %v", info, err)
	}
}

// TestGenerateJSONOverSocket: "json": true over the /v0 API holds a
// generation to a JSON object (the demo model's replies are random bytes
// otherwise), streamed and not, and refuses a model without a tokenizer.
func TestGenerateJSONOverSocket(t *testing.T) {
	ts := startServer(t, DemoModel(), fixtureModel("qwen3"))
	c := ts.client()
	ctx := context.Background()
	textSession := func() string {
		s, err := c.NewSession(ctx, "demo")
		if err != nil {
			t.Fatal(err)
		}
		text := "JSON, please: "
		if _, err := c.Append(ctx, s.ID, apitype.Append{Text: &text}); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	for seed := range uint64(6) {
		id := textSession()
		var streamed strings.Builder
		res, err := c.Generate(ctx, id, apitype.Generate{MaxTokens: intp(32), Seed: &seed, JSON: true, Stream: seed%2 == 1},
			func(tk apitype.Token) error { streamed.WriteString(tk.Text); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if seed%2 == 1 && streamed.String() != res.Text {
			t.Fatalf("seed %d: streamed %q, result %q", seed, streamed.String(), res.Text)
		}
		if out := strings.TrimLeft(res.Text, " \t\r\n"); !strings.HasPrefix(out, "{") && out != "" {
			t.Fatalf("seed %d: %q does not start an object", seed, res.Text)
		}
		if res.FinishReason == "stop" {
			var obj map[string]any
			if err := json.Unmarshal([]byte(res.Text), &obj); err != nil || obj == nil {
				t.Fatalf("seed %d: stopped on %q: %v", seed, res.Text, err)
			}
		}
	}
	// A schema over the socket, and one the server cannot follow.
	id := textSession()
	res, err := c.Generate(ctx, id, apitype.Generate{MaxTokens: intp(200), Seed: new(uint64),
		JSONSchema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2]}}}`)}, nil)
	var v struct {
		OK *bool
		N  int
	}
	if err != nil || res.FinishReason != "stop" || json.Unmarshal([]byte(res.Text), &v) != nil || v.OK == nil || (v.N != 1 && v.N != 2) {
		t.Fatalf("json_schema: %q, %v", res.Text, err)
	}
	if _, err := c.Generate(ctx, id, apitype.Generate{MaxTokens: intp(2),
		JSONSchema: json.RawMessage(`{"type":"object","properties":{"a":{"anyOf":[]}}}`)}, nil); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("unsupported schema: %v", err)
	}
	s, err := c.NewSession(ctx, "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append(ctx, s.ID, apitype.Append{Tokens: []int32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(ctx, s.ID, apitype.Generate{MaxTokens: intp(2), JSON: true}, nil); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("JSON mode on a model without a tokenizer: %v", err)
	}
}

// TestGenerateLogitBiasOverSocket: /v0 generate takes logit_bias as the
// gateway does: +100 on one token makes every sampled token that one, -100
// on the greedy choice moves it, and bad keys or values are a 400.
func TestGenerateLogitBiasOverSocket(t *testing.T) {
	ts := startServer(t, DemoModel())
	c := ts.client()
	ctx := context.Background()
	newSession := func() string {
		s, err := c.NewSession(ctx, "demo")
		if err != nil {
			t.Fatal(err)
		}
		text := "bias: "
		if _, err := c.Append(ctx, s.ID, apitype.Append{Text: &text}); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	seed := uint64(3)
	res, err := c.Generate(ctx, newSession(), apitype.Generate{MaxTokens: intp(6), Seed: &seed, Temperature: f64(1.5),
		LogitBias: map[string]float64{"42": 100}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range res.IDs {
		if id != 42 {
			t.Fatalf("+100 on token 42: generated %v", res.IDs)
		}
	}
	plain, err := c.Generate(ctx, newSession(), apitype.Generate{MaxTokens: intp(1), Temperature: f64(0)}, nil)
	if err != nil || len(plain.IDs) != 1 {
		t.Fatalf("greedy: %+v, %v", plain, err)
	}
	banned, err := c.Generate(ctx, newSession(), apitype.Generate{MaxTokens: intp(1), Temperature: f64(0),
		LogitBias: map[string]float64{fmt.Sprint(plain.IDs[0]): -100}}, nil)
	if err != nil || len(banned.IDs) != 1 || banned.IDs[0] == plain.IDs[0] {
		t.Fatalf("-100 on the greedy token %d: %+v, %v", plain.IDs[0], banned, err)
	}
	for _, lb := range []map[string]float64{{"x": 1}, {"-1": 1}, {"5": 101}, {"99999999999": 1}} {
		if _, err := c.Generate(ctx, newSession(), apitype.Generate{MaxTokens: intp(1), LogitBias: lb}, nil); !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("logit_bias %v: %v, want a bad request", lb, err)
		}
	}
}
