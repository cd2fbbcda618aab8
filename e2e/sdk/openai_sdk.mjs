// The official OpenAI Node SDK against a ringgate node: models.list,
// responses.create (JSON and streaming), and a 429 mapped to the SDK's
// RateLimitError. Prints one JSON line of what it saw; exits 1 on an
// unexpected error. Env: RINGGATE_URL, RINGGATE_KEY, RINGGATE_MODEL, and
// RINGGATE_LIMITED_KEY (a tenant with rpm 1; unset: not tried).
import OpenAI from 'openai';

const base = process.env.RINGGATE_URL + '/v1';
const model = process.env.RINGGATE_MODEL;
const client = new OpenAI({ baseURL: base, apiKey: process.env.RINGGATE_KEY, maxRetries: 0 });
const out = {};

const models = [];
for await (const m of client.models.list()) models.push(m.id);
out.models = models;

const r = await client.responses.create({ model, input: 'Say hi.', instructions: 'Be brief.', max_output_tokens: 40 });
out.json = { status: r.status, text: r.output_text.length > 0, input_tokens: r.usage?.input_tokens, output_tokens: r.usage?.output_tokens };

const stream = await client.responses.create({ model, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Count to five.' }] }], stream: true });
let deltas = 0, completed = null;
for await (const ev of stream) {
  if (ev.type === 'response.output_text.delta') deltas++;
  if (ev.type === 'response.completed') completed = ev.response.usage;
}
out.stream = { deltas, completed };

out.limited = { ok: 0, rateLimited: 0, other: [] };
const limitedKey = process.env.RINGGATE_LIMITED_KEY;
const limited = limitedKey ? new OpenAI({ baseURL: base, apiKey: limitedKey, maxRetries: 0 }) : null;
for (let i = 0; limited && i < 3; i++) {
  try {
    await limited.responses.create({ model, input: 'hi', max_output_tokens: 5 });
    out.limited.ok++;
  } catch (e) {
    if (e instanceof OpenAI.RateLimitError) {
      out.limited.rateLimited++;
      out.limited.retryAfter = e.headers?.get?.('retry-after') ?? null;
    } else {
      out.limited.other.push(String(e));
    }
  }
}
console.log(JSON.stringify(out));
