// The official `openai` client for Node against photon serve: models, completions and chat
// completions, each streamed and not, n choices, penalties, a logit bias and alternatives, several
// prompts with echo, and
// errors as the client's own classes. Prints one JSON object for test_serve.py to compare with photon generate.
//
// usage: node openai_client.mjs BASE_URL API_KEY MODEL PROMPT MESSAGES_JSON
import OpenAI from 'openai';

const [baseURL, apiKey, model, prompt, messagesJson] = process.argv.slice(2);
const messages = JSON.parse(messagesJson);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const out = {};

out.models = [];
for await (const m of client.models.list()) out.models.push(m.id);

const completion = await client.completions.create({ model, prompt, max_tokens: 16, temperature: 0 });
out.completion = { text: completion.choices[0].text, usage: completion.usage };

let text = '';
const completionStream = await client.completions.create({
  model, prompt, max_tokens: 16, temperature: 0, stream: true,
});
for await (const chunk of completionStream) text += chunk.choices[0]?.text ?? '';
out.completion_stream = { text };

const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
out.chat = { text: chat.choices[0].message.content, finish_reason: chat.choices[0].finish_reason };

const chatStream = await client.chat.completions.create({
  model, messages, max_tokens: 16, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
const streamed = { text: '', role: null, finish_reason: null, usage: null };
for await (const chunk of chatStream) {
  if (chunk.usage) streamed.usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;
  if (choice.delta.role) streamed.role = choice.delta.role;
  streamed.text += choice.delta.content ?? '';
  if (choice.finish_reason) streamed.finish_reason = choice.finish_reason;
}
out.chat_stream = streamed;

// Two choices, each sampled with its own seed (seed, seed + 1).
const two = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0.9, seed: 11, n: 2,
});
out.chat_choices = two.choices.map((c) => ({ index: c.index, text: c.message.content }));

// OpenAI's penalties and a logit bias (token 5 favoured), as the client sends them.
const penalized = await client.completions.create({
  model, prompt, max_tokens: 16, temperature: 0.8, seed: 3, presence_penalty: 0.7,
  frequency_penalty: 0.4, logit_bias: { 5: 2.5 },
});
out.penalized = { text: penalized.choices[0].text };

// Each token's two most likely alternatives, as the client types them.
const alternatives = await client.chat.completions.create({
  model, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2,
});
out.alternatives = alternatives.choices[0].logprobs.content.map((c) => ({
  token: c.token, logprob: c.logprob, top: c.top_logprobs.map((t) => t.logprob),
}));

// Two prompts with echo and one alternative each, as an evaluation harness scores continuations.
const echoed = await client.completions.create({
  model, prompt: [prompt, `${prompt} God`], max_tokens: 1, temperature: 0, echo: true, logprobs: 1,
});
out.echoed = echoed.choices.map((c) => ({
  index: c.index, text: c.text, tokens: c.logprobs.tokens, logprobs: c.logprobs.token_logprobs,
  top: c.logprobs.top_logprobs,
}));

// Errors arrive as the client's error classes with their status.
async function failure(call) {
  try {
    await call();
    return ['no error', 0];
  } catch (error) {
    return [error.constructor.name, error.status];
  }
}
const badKey = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
out.errors = {
  bad_key: await failure(() => badKey.completions.create({ model, prompt, max_tokens: 1 })),
  bad_model: await failure(() => client.completions.create({ model: 'gpt-4o', prompt, max_tokens: 1 })),
  bad_n: await failure(() => client.chat.completions.create({ model, messages, n: 17 })),
};
console.log(JSON.stringify(out));
