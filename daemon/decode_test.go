package daemon

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/client/apitype"
)

var decodeSeeds = []string{
	``, `{}`, `null`, `[]`, `"x"`, `{"model":"demo"}`, `{"model":1}`,
	`{"text":"hi"}`, `{"tokens":[1,2,3]}`, `{"tokens":[-1]}`, `{"tokens":[1e99]}`, `{"tokens":"abc"}`,
	`{"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[{"content":"hi"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"add_generation_prompt":false,"chat_kwargs":{"enable_thinking":false}}`,
	`{"text":"a","tokens":[1]}`, `{"max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":1,"stop":["\n"],"stream":true}`,
	`{"logit_bias":{"5":-100,"7":3.5}}`, `{"logit_bias":{"x":1}}`, `{"logit_bias":{"5":1e9}}`, `{"logit_bias":[1]}`,
	`{"max_tokens":-1}`, `{"temperature":-0.1}`, `{"top_p":2}`, `{"seed":-1}`, `{"stop":[""]}`, `{"top_logprobs":99}`,
	`{"at":3}`, `{"at":-1}`, `{"length":0}`, `{"length":null}`, `{} {}`, `{"a":1}`, "{\"text\":\"\xff\"}", `{"text":"x"`,
}

// FuzzDecode: no body makes a decoder panic, and every rejection is a
// bad-request error with a message.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(name string, err error) {
			if err != nil && (!errors.Is(err, errBadBody) || StatusOf(err) != http.StatusBadRequest || len(err.Error()) < len("bad request body: x")) {
				t.Fatalf("%s(%q): error %v is not a described bad request", name, body, err)
			}
		}
		_, err := decodeCreate(body)
		check("create", err)
		in, err := decodeAppend(body)
		check("append", err)
		if err == nil {
			n := 0
			for _, set := range []bool{in.Text != "", in.Tokens != nil, in.Messages != nil} {
				if set {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("append(%q) accepted %d inputs", body, n)
			}
		}
		p, _, err := decodeGenerate(body)
		check("generate", err)
		if err == nil && (p.MaxTokens < 1 || p.Sampling.Temperature < 0 || p.TopLogprobs > maxTopLogprobs) {
			t.Fatalf("generate(%q) accepted %+v", body, p)
		}
		at, err := decodeFork(body)
		check("fork", err)
		if err == nil && at < -1 {
			t.Fatalf("fork(%q) accepted at=%d", body, at)
		}
		n, err := decodeTruncate(body)
		check("truncate", err)
		if err == nil && n < 0 {
			t.Fatalf("truncate(%q) accepted %d", body, n)
		}
	})
}

// TestMalformedBodiesOverSocket sends bad bodies to every POST route of a
// real daemon: each gets a 400 with a message, and the daemon stays up.
func TestMalformedBodiesOverSocket(t *testing.T) {
	ts := startServer(t, DemoModel())
	hc := unixHTTP(ts.sock)
	var s apitype.Session
	do(t, hc, "POST", "http://pocketd/v0/sessions", `{"model":"demo"}`, &s)
	routes := []string{"/v0/sessions", "/v0/sessions/" + s.ID + "/append", "/v0/sessions/" + s.ID + "/generate",
		"/v0/sessions/" + s.ID + "/fork", "/v0/sessions/" + s.ID + "/truncate"}
	bad := []string{`{`, `[1,2]`, `{"bogus":true}`, `{} trailing`, `"str"`, "\x00\x01", `{"model":{"x":1},"text":5}`, strings.Repeat("[", 100000)}
	for _, r := range routes {
		for _, b := range bad {
			var eb apitype.ErrorBody
			st := do(t, hc, "POST", "http://pocketd"+r, b, &eb)
			if st != 400 || eb.Error.Message == "" || eb.Error.Type != "invalid_request_error" {
				t.Errorf("POST %s %.20q: %d %+v", r, b, st, eb)
			}
		}
	}
	var h apitype.Health
	if st := do(t, hc, "GET", "http://pocketd/v0/health", "", &h); st != 200 {
		t.Fatalf("daemon unhealthy after bad bodies: %d", st)
	}
}
