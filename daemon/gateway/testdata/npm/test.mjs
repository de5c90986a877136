// End-to-end test of pocketd's OpenAI gateway with the official `openai`
// npm client. daemon/gateway's Go test (TestNodeOpenAI) starts a daemon
// serving the demo model and runs this with POCKETD_BASE_URL set.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const base = process.env.POCKETD_BASE_URL;
if (!base) {
  console.error('POCKETD_BASE_URL is not set');
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const model = 'demo';
const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Say hello from Node.' },
];

async function plainChat() {
  const res = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  assert.equal(res.object, 'chat.completion');
  assert.equal(res.choices.length, 1);
  const ch = res.choices[0];
  assert.equal(ch.message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(ch.finish_reason), ch.finish_reason);
  assert.ok(res.usage.prompt_tokens > 10);
  assert.equal(res.usage.total_tokens, res.usage.prompt_tokens + res.usage.completion_tokens);
  assert.equal(typeof res.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.equal(ch.logprobs.content.length, res.usage.completion_tokens);
  for (const lp of ch.logprobs.content) {
    assert.ok(lp.logprob <= 0);
    assert.equal(lp.top_logprobs.length, 2);
  }
  return res;
}

async function streamedChat(plain) {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, plain.choices[0].message.content, 'greedy streamed text equals the plain reply');
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.ok(usage, 'stream_options.include_usage sends a usage chunk');
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
  // The same prompt again: its full blocks come from the prefix cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(usage));
}

async function stopStrings() {
  const full = await client.chat.completions.create({ model, messages, max_tokens: 40, temperature: 0 });
  const text = full.choices[0].message.content;
  if (text.length < 10) return;
  const stop = text.slice(6, 9);
  const res = await client.chat.completions.create({ model, messages, max_tokens: 40, temperature: 0, stop: [stop] });
  assert.equal(res.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(res.choices[0].finish_reason, 'stop');
}

async function completions() {
  const prompt = 'Once upon a time';
  const res = await client.completions.create({ model, prompt, max_tokens: 4, echo: true, logprobs: 1, temperature: 0 });
  const ch = res.choices[0];
  assert.ok(ch.text.startsWith(prompt));
  assert.equal(ch.logprobs.tokens.length, prompt.length + 4); // byte-level tokenizer
  assert.equal(ch.logprobs.token_logprobs[0], null);
  assert.equal(ch.logprobs.tokens.join(''), ch.text);
}

async function errors() {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages, n: 17 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages, max_tokens: 1_000_000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded',
  );
}

async function choices() {
  const req = { model, messages, max_tokens: 6, temperature: 1, seed: 3, n: 2 };
  const res = await client.chat.completions.create(req);
  assert.deepEqual(res.choices.map((c) => c.index), [0, 1]);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const texts = ['', ''];
  for await (const chunk of stream) {
    for (const c of chunk.choices) texts[c.index] += c.delta.content ?? '';
  }
  assert.deepEqual(texts, res.choices.map((c) => c.message.content), 'streamed choices equal the plain ones (same seeds)');
}

async function embeddings() {
  // The client asks for base64 unless told otherwise, and decodes it.
  const b64 = await client.embeddings.create({ model, input: ['hello there', 'good night'] });
  const flt = await client.embeddings.create({ model, input: ['hello there', 'good night'], encoding_format: 'float' });
  assert.equal(b64.data.length, 2);
  for (let i = 0; i < 2; i++) {
    assert.equal(b64.data[i].index, i);
    assert.deepEqual(b64.data[i].embedding, flt.data[i].embedding.map(Math.fround));
    const norm = Math.hypot(...flt.data[i].embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  }
  assert.equal(b64.usage.prompt_tokens, 21);
}

async function responsesAPI() {
  // The Responses API: plain, streamed (same text, greedy), continued by
  // previous_response_id, and its output_text helper.
  const params = { model, input: 'Say hello.', instructions: 'You are terse.', max_output_tokens: 8, temperature: 0 };
  const res = await client.responses.create(params);
  assert.equal(res.object, 'response');
  assert.ok(res.output_text.length > 0, 'output_text');
  let streamed = '';
  let final;
  for await (const ev of await client.responses.create({ ...params, stream: true })) {
    if (ev.type === 'response.output_text.delta') streamed += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.equal(streamed, res.output_text, 'streamed text equals the plain one');
  assert.equal(final.usage.output_tokens, res.usage.output_tokens);
  const next = await client.responses.create({ input: 'Again.', previous_response_id: res.id, max_output_tokens: 4, temperature: 0 });
  assert.equal(next.previous_response_id, res.id);
  assert.equal(next.model, model);
  const got = await client.responses.retrieve(next.id);
  assert.equal(got.output_text, next.output_text);
  // Its own input, listed (the previous response's is not).
  const items = [];
  for await (const it of client.responses.inputItems.list(next.id, { limit: 1, order: 'asc' })) items.push(it);
  assert.deepEqual(items.map((it) => [it.type, it.role, it.content[0].text]), [['message', 'user', 'Again.']]);
}

async function models() {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [model]);
}

const tests = { plainChat, streamedChat, stopStrings, completions, choices, embeddings, responsesAPI, errors, models };
let plain;
let failed = 0;
for (const [name, fn] of Object.entries(tests)) {
  try {
    const out = await fn(plain);
    if (name === 'plainChat') plain = out;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}
process.exit(failed ? 1 : 0);
