package gateway

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzDecode holds request decoding to its contract on any input: no
// panic; an error is a 400 with a message; a decoded request is within
// the limits the handlers rely on.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":["a","b"],"logprobs":true,"top_logprobs":3,"seed":-7,"top_k":-1}`,
		`{"prompt":"hello","echo":true,"logprobs":2,"max_tokens":3}`,
		`{"messages":[{"role":"user","content":"x"}],"logit_bias":{"7":-100},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},"response_format":{"type":"text"}}`,
		`{"prompt":[1,2,3]}`, `{"prompt":[[1,2]]}`, `{"prompt":["a"]}`, `{"prompt":"","session_id":"x"}`,
		`{"messages":"hi"}`, `[]`, `null`, `{"temperature":"NaN"}`, "{\"prompt\":\"\xff\"}", `{"n":2}`, ``,
		`{"input":["a",[1,2]],"dimensions":4,"encoding_format":"base64"}`, `{"input":[[1],[2,3]]}`, `{"input":[1,2]}`,
		`{"input":"hi","instructions":"be brief","max_output_tokens":4,"previous_response_id":"resp-1","store":false}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"assistant","content":"b"}],"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}}}`,
		`{"input":[{"role":"user","content":"w?"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"x"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"input":[{"id":"msg_1","role":"developer","content":"d"}],"include":["message.output_text.logprobs","reasoning.encrypted_content"],"top_logprobs":3,"metadata":{"k":"v"},"parallel_tool_calls":false}`,
		`{"model":"demo","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r","is_error":true}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"stop_sequences":["E"],"stream":true}`,
		`{"max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"pre"}],"tool_choice":{"type":"none"},"thinking":{"type":"disabled"}}`,
		`{"messages":[{"role":"user","content":"x"}],"reasoning_format":"none"}`,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"prompt":null}`), "sess")
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		check := func(j *job, err *apiError, header string) {
			if err != nil {
				if err.status != 400 || err.msg == "" {
					t.Fatalf("error %+v", err)
				}
				if j != nil {
					t.Fatal("job and error")
				}
				return
			}
			p := j.params
			if p.MaxTokens < 0 || p.TopLogprobs < 0 || p.TopLogprobs > maxTopLogprobs || len(p.Stop) > maxStops {
				t.Fatalf("params out of range: %+v", p)
			}
			for _, s := range p.Stop {
				if s == "" {
					t.Fatal("empty stop string")
				}
			}
			if header != "" && j.sessionID != header {
				t.Fatalf("session %q, header %q", j.sessionID, header)
			}
			if sp := p.Sampling; sp.Temperature < 0 || sp.TopP < 0 || sp.TopP > 1 || sp.MinP < 0 || sp.MinP > 1 || sp.TopK < 0 {
				t.Fatalf("sampling out of range: %+v", sp)
			}
			for id, b := range p.Sampling.LogitBias {
				if id < 0 || b < -100 || b > 100 {
					t.Fatalf("logit_bias %d: %v", id, b)
				}
			}
			if j.toolPrefix != "" && !j.tools {
				t.Fatal("forced tool call without tools")
			}
			if j.includeUsage && !j.stream {
				t.Fatal("include_usage without stream")
			}
		}
		j, err := decodeChat(body, header)
		check(j, err, header)
		if err == nil && len(j.messages) == 0 {
			t.Fatal("chat without messages")
		}
		for _, counting := range []bool{false, true} {
			j, err = decodeMessages(body, header, counting)
			check(j, err, header)
			if err == nil && (len(j.messages) == 0 || !counting && !j.maxTokensSet || j.prefill != "" && j.toolForce) {
				t.Fatalf("messages job: %+v", j)
			}
		}
		j, err = decodeCompletion(body, header)
		check(j, err, header)
		if err == nil && (j.text == nil) == (j.ids == nil) {
			t.Fatalf("completion prompt: text %v ids %v", j.text, j.ids)
		}
		if err == nil && j.text != nil && *j.text == "" && j.sessionID == "" && j.suffix == nil {
			t.Fatal("empty prompt without a session")
		}
		rj, err := decodeResponses(body)
		if err == nil {
			check(rj.job, nil, "") // no sessions on /v1/responses
			if len(rj.input) == 0 || rj.n != 1 {
				t.Fatalf("responses: %d input messages, n %d", len(rj.input), rj.n)
			}
		} else if rj != nil || err.status != 400 || err.msg == "" {
			t.Fatalf("responses error %+v", err)
		}
		var tr tokenizeRequest
		if err := decodeJSON(body, &tr); err != nil && err.status != 400 {
			t.Fatalf("tokenize error %+v", err)
		}
		var er embeddingRequest
		if err := decodeJSON(body, &er); err == nil {
			texts, ids, err := embedInputs(er.Input)
			switch {
			case err != nil && err.status != 400:
				t.Fatalf("embeddings input error %+v", err)
			case err == nil && (len(texts) != len(ids) || len(ids) == 0 || len(ids) > maxEmbedInputs):
				t.Fatalf("embeddings: %d texts, %d token lists", len(texts), len(ids))
			case err == nil:
				for i := range ids {
					if (texts[i] == nil) == (ids[i] == nil) && !(texts[i] == nil && len(ids[i]) == 0) {
						t.Fatalf("input %d: text %v and ids %v", i, texts[i], ids[i])
					}
				}
			}
		}
	})
}

// FuzzAppendJSONString: the streaming fast path encodes strings exactly as
// encoding/json decodes them.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x00\x1f\n\r\t", "é日本\u2028\u2029", "bad\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, b, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s)) // invalid bytes become U+FFFD
		}
		if got != want {
			t.Fatalf("%q round-trips to %q", want, got)
		}
	})
}
