// A fake OpenAI-compatible chat-completions server for the end-to-end tests.
//
// Plain node:http on 127.0.0.1 and a random port. Every POST to /v1/chat/completions (or to
// Anthropic's /v1/messages and OpenAI's /v1/responses, whose turns fake-providers.mjs builds) is
// recorded and answered with the next scripted reply of the *conversation* it belongs to: a
// conversation is found by a key the test chose, looked for in the first user message of the
// request (tests put a unique key in their first prompt). Several tests can therefore share one
// fake, even concurrently, and a request nobody scripted is answered with HTTP 500 naming what
// it got, so an unexpected extra model call fails loudly instead of hanging.
//
// Replies are streamed the way OpenAI streams them: a role chunk with empty content, one chunk
// per content delta, tool-call chunks (the first of each call with index, id, type and name
// and empty arguments, then the arguments in fragments of a few characters, carrying only the
// index), a chunk with the finish_reason, a usage chunk with empty `choices`, and `[DONE]`.
// Each frame is written separately, a little apart, so the server really reads a stream; a
// `burst` reply writes them all at once, in one piece of the body, as a fast model or a
// buffering proxy delivers them.

import http from "node:http";

export const MODEL = "gpt-4o-mini";

/** The model endpoints served: Chat Completions, Anthropic Messages, OpenAI Responses. */
const ROUTES = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];

function chunk(choices, extra = {}) {
  return { id: "chatcmpl-e2e", object: "chat.completion.chunk", created: 1, model: MODEL, choices, ...extra };
}

function delta(d) {
  return chunk([{ index: 0, delta: d, finish_reason: null }]);
}

/** Splits text into fragments of `size` characters (whole code points). */
export function split(text, size = 3) {
  const chars = Array.from(text);
  const out = [];
  for (let i = 0; i < chars.length; i += size) out.push(chars.slice(i, i + size).join(""));
  return out;
}

/**
 * One model turn as a list of SSE payloads (objects, or the string "[DONE]").
 *   reasoning: array of reasoning deltas, sent first in `reasoningField` (`reasoning_content`
 *              as DeepSeek and vLLM send it, or `reasoning` as OpenRouter and Ollama do)
 *   text:  array of content deltas (each becomes one chunk)
 *   calls: [{ id, name, arguments: <string or object> }], arguments split into small fragments
 */
export function turn({
  reasoning = [],
  reasoningField = "reasoning_content",
  text = [],
  calls = [],
  usage = { prompt: 11, completion: 7 },
  fragment = 3,
} = {}) {
  const frames = [delta({ role: "assistant", content: "" })];
  for (const part of reasoning) frames.push(delta({ [reasoningField]: part }));
  for (const part of text) frames.push(delta({ content: part }));
  calls.forEach((call, index) => {
    const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments);
    frames.push(
      delta({
        tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }],
      }),
    );
    for (const piece of split(args, fragment)) {
      frames.push(delta({ tool_calls: [{ index, function: { arguments: piece } }] }));
    }
  });
  frames.push(chunk([{ index: 0, delta: {}, finish_reason: calls.length > 0 ? "tool_calls" : "stop" }]));
  if (usage) {
    frames.push(
      chunk([], {
        usage: {
          prompt_tokens: usage.prompt,
          completion_tokens: usage.completion,
          total_tokens: usage.prompt + usage.completion,
        },
      }),
    );
  }
  frames.push("[DONE]");
  return { frames };
}

/** A text-only turn. */
export const textTurn = (...parts) => turn({ text: parts });

/** A turn with tool calls (and optional text before them). */
export const toolTurn = (calls, text = []) => turn({ text, calls });

/** The same reply, written in one piece. */
export const burst = (reply) => ({ ...reply, burst: true });

/** An HTTP error reply, before any stream byte. */
export const errorReply = (status, message = "scripted error") => ({
  status,
  body: { error: { message, type: "e2e", code: null } },
});

function firstUserText(body) {
  // Chat Completions and Messages have `messages`, Responses has `input` items.
  const user = (body?.messages ?? body?.input ?? []).find((m) => m.role === "user");
  if (!user) return "";
  if (typeof user.content === "string") return user.content;
  if (Array.isArray(user.content)) {
    return user.content
      .filter((p) => p && typeof p.text === "string")
      .map((p) => p.text)
      .join(" ");
  }
  return "";
}

/**
 * Starts the fake. Returns
 *   baseUrl                    "http://127.0.0.1:<port>/v1"
 *   script(key, ...replies)    queue replies for the conversation whose first user message
 *                              contains `key`
 *   requests(key)              recorded request bodies of that conversation, in order
 *   unused(key)                scripted replies not consumed yet
 *   aborts(key)                when (performance.now()) each reply the server closed before
 *                              its end was closed; a reply's `delayMs` paces its frames
 *   unmatched                  bodies of requests no script matched
 *   close()
 */
export async function startFakeOpenAI({ frameDelayMs = 1 } = {}) {
  const scripts = new Map(); // key -> { replies: [], requests: [] }
  const unmatched = [];

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => handle(req, res, Buffer.concat(chunks).toString("utf8")).catch((err) => {
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end(`fake OpenAI crashed: ${err?.stack ?? err}`);
    }));
  });

  async function handle(req, res, raw) {
    const path = new URL(req.url, "http://x").pathname;
    if (req.method !== "POST" || !ROUTES.includes(path)) {
      res.writeHead(404, { "content-type": "text/plain" });
      res.end(`fake OpenAI: no route for ${req.method} ${path}`);
      return;
    }
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      body = { unparsed: raw };
    }
    const text = firstUserText(body);
    // The longest matching key wins, so "chat" and "chat-2" can coexist.
    const key = [...scripts.keys()].filter((k) => text.includes(k)).sort((a, b) => b.length - a.length)[0];
    if (key === undefined) {
      unmatched.push(body);
      sendError(res, 500, `fake OpenAI: no script for a conversation starting with ${JSON.stringify(text)}`);
      return;
    }
    const script = scripts.get(key);
    script.requests.push({ body, headers: req.headers });
    const reply = script.replies.shift();
    if (reply === undefined) {
      sendError(res, 500, `fake OpenAI: script ${JSON.stringify(key)} has no reply left for request #${script.requests.length}`);
      return;
    }
    if (reply.status) {
      sendError(res, reply.status, reply.body);
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const encode = (frame) =>
      frame?.event !== undefined
        ? `event: ${frame.event}\ndata: ${JSON.stringify(frame.data)}\n\n`
        : `data: ${typeof frame === "string" ? frame : JSON.stringify(frame)}\n\n`;
    if (reply.burst) {
      res.end(reply.frames.map(encode).join(""));
      return;
    }
    // A reply the server closes before its end is recorded with when it closed.
    res.on("close", () => {
      if (!res.writableFinished) script.aborts.push(performance.now());
    });
    const delayMs = reply.delayMs ?? frameDelayMs;
    for (const frame of reply.frames) {
      if (res.destroyed) return;
      res.write(encode(frame));
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    }
    res.end();
  }

  function sendError(res, status, message) {
    const payload = typeof message === "string" ? { error: { message, type: "fake_openai" } } : message;
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(payload));
  }

  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address();

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    script(key, ...replies) {
      if (!scripts.has(key)) scripts.set(key, { replies: [], requests: [], aborts: [] });
      scripts.get(key).replies.push(...replies);
    },
    requests(key) {
      return (scripts.get(key)?.requests ?? []).map((r) => r.body);
    },
    unused(key) {
      return scripts.get(key)?.replies.length ?? 0;
    },
    aborts(key) {
      return scripts.get(key)?.aborts ?? [];
    },
    unmatched,
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
