package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/pocketllm/pocketllm/daemon/gateway"
	"github.com/pocketllm/pocketllm/session"
)

// Gateway overhead: the same greedy generation (the demo model, a
// 3-token prompt, benchNew new tokens; greedy decoding of the demo model
// never emits an end token, so every run makes exactly benchNew tokens),
// once through the engine loop alone (session.Manager.Complete with a
// no-op token callback) and once through the gateway as a streamed
// /v1/completions request over TCP, read to [DONE] by a Go client.
// BenchmarkGatewayOverhead runs the two paired, alternating which goes
// first, so that load from other processes hits both alike; it reports
// both rates and the gateway's loss in percent. docs/benchmarks.md
// records the numbers.

const benchNew = 256

var benchPrompt = []int32{'T', 'h', 'e'}

// engineRun generates through the engine loop alone.
func engineRun(b *testing.B, d *testDaemon) int {
	p := session.GenerateParams{MaxTokens: benchNew, Sampling: session.SamplingParams{Temperature: 0}}
	res, err := d.srv.Sessions().Complete(context.Background(), gateway.Anonymous, "demo", benchPrompt, p,
		func(session.TokenEvent) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	return len(res.IDs)
}

var benchBody, _ = json.Marshal(map[string]any{"model": "demo", "prompt": benchPrompt, "max_tokens": benchNew,
	"temperature": 0, "stream": true, "stream_options": map[string]any{"include_usage": true}})

// gatewayRun generates through the gateway: a streamed request read to
// its end. The client decodes only the usage chunk, so that its own CPU
// time (on the same cores) weighs little in the comparison.
func gatewayRun(b *testing.B, d *testDaemon) int {
	resp, err := d.tcp.Post(d.base+"/v1/completions", "application/json", bytes.NewReader(benchBody))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var last, prev []byte
	for sc.Scan() {
		if line := sc.Bytes(); len(line) > 0 {
			prev, last = last, prev
			last = append(last[:0], line...)
		}
	}
	if sc.Err() != nil || string(last) != "data: [DONE]" {
		b.Fatalf("stream ended with %q (%v)", last, sc.Err())
	}
	var u struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(bytes.TrimPrefix(prev, []byte("data: ")), &u); err != nil {
		b.Fatal(err)
	}
	return u.Usage.CompletionTokens
}

func benchRate(b *testing.B, run func(*testing.B, *testDaemon) int) {
	d := sharedDaemon(b)
	run(b, d) // warm the prefix cache and the connection
	tokens := 0
	start := time.Now()
	for b.Loop() {
		tokens += run(b, d)
	}
	b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tok/s")
}

func BenchmarkEngineLoop(b *testing.B) { benchRate(b, engineRun) }

func BenchmarkGatewayStream(b *testing.B) { benchRate(b, gatewayRun) }

func BenchmarkGatewayOverhead(b *testing.B) {
	d := sharedDaemon(b)
	engineRun(b, d)
	gatewayRun(b, d)
	var et, gt time.Duration
	var en, gn int
	i := 0
	for b.Loop() {
		for k := range 2 {
			start := time.Now()
			if (i+k)%2 == 0 {
				en += engineRun(b, d)
				et += time.Since(start)
			} else {
				gn += gatewayRun(b, d)
				gt += time.Since(start)
			}
		}
		i++
	}
	er, gr := float64(en)/et.Seconds(), float64(gn)/gt.Seconds()
	b.ReportMetric(er, "engine_tok/s")
	b.ReportMetric(gr, "gateway_tok/s")
	b.ReportMetric(100*(er-gr)/er, "loss_%")
}
