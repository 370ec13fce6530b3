// Shared harness of the end-to-end tests: both real clients, the server binary, and a guard that
// fails a run on any client warning or error.
//
// The harness builds nothing: it runs the binary named by AGUI_HOST_BIN (relative paths are
// taken from the repository root), by default target/debug/agui-host. scripts/e2e.sh builds it.

import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import { after, before } from "node:test";

import * as client1 from "agui-client-1";
import * as client0059 from "agui-client-0059";

import { startFakeOpenAI } from "./fake-openai.mjs";

export const E2E_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(E2E_DIR, "..", "..");
export const AGENTS_TOML = path.join(E2E_DIR, "agents.toml");

const require = createRequire(import.meta.url);

function packageVersion(specifier) {
  return require(`${specifier}/package.json`).version;
}

/** The version of @ag-ui/core that a client package itself resolves. */
function coreVersionOf(clientSpecifier) {
  const clientMain = require.resolve(clientSpecifier);
  return createRequire(clientMain)("@ag-ui/core/package.json").version;
}

/**
 * The two client generations. `protocol10` says whether the client sends
 * `protocolVersion: "1.0"` (and so gets 1.0 shapes such as `outcome.pendingToolCallIds`).
 */
export const CLIENTS = [
  {
    name: "@ag-ui/client 1.0.0",
    version: "1.0.0",
    tag: "v100",
    HttpAgent: client1.HttpAgent,
    installed: packageVersion("agui-client-1"),
    core: coreVersionOf("agui-client-1"),
    protocol10: true,
  },
  {
    name: "@ag-ui/client 0.0.59",
    version: "0.0.59",
    tag: "v0059",
    HttpAgent: client0059.HttpAgent,
    installed: packageVersion("agui-client-0059"),
    core: coreVersionOf("agui-client-0059"),
    protocol10: false,
  },
];

export function serverBinary() {
  const bin = process.env.AGUI_HOST_BIN || path.join("target", "debug", "agui-host");
  return path.resolve(REPO_ROOT, bin);
}

export async function freePort() {
  const server = net.createServer();
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Servers still running when this test process exits (a crash, a timeout) are killed with it.
const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/**
 * Registers the file's `before` and `after` hooks: a fake OpenAI-compatible upstream and a server
 * configured against it, stopped at the end. The returned object's `fake` and `server` are set
 * once the hooks ran; `serverLog()` is the server's log tail, for assertion messages.
 */
export function withFakeUpstreamAndServer() {
  const env = {
    fake: undefined,
    server: undefined,
    serverLog: () => (env.server ? env.server.log().split("\n").slice(-40).join("\n") : ""),
  };
  before(async () => {
    env.fake = await startFakeOpenAI();
    env.server = await startServer({ upstream: env.fake.baseUrl });
  });
  after(async () => {
    await env.server?.stop();
    await env.fake?.close();
  });
  return env;
}

/**
 * Starts the server binary with environment-only configuration and waits for GET /health.
 *   upstream:   base URL of the fake OpenAI server; omit for the offline model (then no
 *               OPENAI_* variable at all is passed)
 *   configFile: APP_CONFIG_FILE, or null for the embedded defaults
 *   extraEnv:   more variables for the server (e.g. APP_THREADS__STORE)
 * Returns { url, port, log(), stop() }.
 */
export async function startServer({ upstream, configFile = AGENTS_TOML, extraEnv = {} } = {}) {
  const bin = serverBinary();
  if (!fs.existsSync(bin)) {
    throw new Error(`server binary ${bin} not found: run scripts/e2e.sh, or cargo build, or set AGUI_HOST_BIN`);
  }
  // Nothing of the caller's configuration leaks in: no OPENAI_*, APP_*, HOST or PORT.
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith("OPENAI_") || k.startsWith("APP_") || k === "HOST" || k === "PORT") continue;
    env[k] = v;
  }
  env.HOST = "127.0.0.1";
  if (upstream) {
    env.OPENAI_BASE_URL = upstream;
    env.OPENAI_API_KEY = "test";
  }
  if (configFile) env.APP_CONFIG_FILE = configFile;
  Object.assign(env, extraEnv);

  let lastError;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    env.PORT = String(port);
    const output = [];
    const child = spawn(bin, [], { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    running.add(child);
    child.stdout.on("data", (d) => output.push(d));
    child.stderr.on("data", (d) => output.push(d));
    let exited = null;
    const exit = new Promise((resolve) =>
      child.once("exit", (code, signal) => {
        exited = { code, signal };
        running.delete(child);
        resolve(exited);
      }),
    );
    // eslint-disable-next-line no-control-regex
    const log = () => Buffer.concat(output).toString("utf8").replace(/\x1b\[[0-9;]*m/g, "");
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    let healthy = false;
    while (Date.now() < deadline && exited === null) {
      try {
        const res = await fetch(`${url}/health`);
        if (res.ok && (await res.json()).status === "ok") {
          healthy = true;
          break;
        }
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    if (healthy) {
      return {
        url,
        port,
        log,
        async stop() {
          if (exited === null) {
            child.kill("SIGTERM");
            const timer = setTimeout(() => exited === null && child.kill("SIGKILL"), 5_000);
            await exit;
            clearTimeout(timer);
          }
        },
      };
    }
    if (exited === null) {
      child.kill("SIGKILL");
      await exit;
    }
    lastError = new Error(`agui-host did not become healthy on port ${port} (${JSON.stringify(exited)}):\n${log()}`);
    // A port taken between freePort() and the bind is retried; anything else is reported.
    if (!/address.*in use/i.test(log())) break;
  }
  throw lastError;
}

const VERIFY_WORDS = /\[ag-ui\]|enforce|verif|cannot send|failed to apply|no active|no message found|no tool call found/i;

function render(args) {
  return args
    .map((a) => (a instanceof Error ? a.stack ?? String(a) : typeof a === "string" ? a : safeJson(a)))
    .join(" ");
}

function safeJson(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

/**
 * Runs `fn` with console.warn and console.error captured. Returns { value, error, warnings,
 * errors }, where `error` is what `fn` threw (or undefined). Nothing is printed while captured.
 */
export async function captureConsole(fn) {
  const warnings = [];
  const errors = [];
  const saved = { warn: console.warn, error: console.error };
  console.warn = (...args) => warnings.push(render(args));
  console.error = (...args) => errors.push(render(args));
  try {
    const value = await fn();
    return { value, error: undefined, warnings, errors };
  } catch (error) {
    return { value: undefined, error, warnings, errors };
  } finally {
    console.warn = saved.warn;
    console.error = saved.error;
  }
}

/**
 * Runs the agent once through the client's own pipeline (transport, enforce, chunk expansion,
 * verify, apply). Records every event the client applied. Throws if runAgent() rejects or if
 * the client printed any warning or error (its `[ag-ui]` enforce messages, verify or reducer
 * complaints such as "Failed to apply state patch", or anything else).
 */
export async function run(agent, params = {}) {
  const events = [];
  const outcome = await captureConsole(() =>
    agent.runAgent(params, {
      onEvent: ({ event }) => {
        events.push(structuredClone(event));
      },
    }),
  );
  const complaints = [
    ...outcome.warnings.map((w) => `console.warn: ${w}`),
    ...outcome.errors.map((e) => `console.error: ${e}`),
  ];
  if (outcome.error) {
    throw new Error(
      `runAgent() rejected: ${outcome.error?.message ?? outcome.error}\n` +
        `client output:\n${complaints.join("\n") || "(none)"}\nevents: ${types(events).join(", ")}`,
      { cause: outcome.error },
    );
  }
  if (complaints.length > 0) {
    const flagged = complaints.filter((c) => VERIFY_WORDS.test(c));
    throw new Error(
      `the client complained (${flagged.length} [ag-ui]/enforce/verify messages):\n${complaints.join("\n")}\n` +
        `events: ${types(events).join(", ")}`,
    );
  }
  return { result: outcome.value, events };
}

/**
 * Runs the agent expecting runAgent() to reject. Returns { error, errors, warnings }. Fails if
 * it resolves, or if the client printed anything other than its own report of the failure.
 */
export async function runExpectingRejection(agent, params = {}) {
  const events = [];
  const outcome = await captureConsole(() =>
    agent.runAgent(params, {
      onEvent: ({ event }) => {
        events.push(structuredClone(event));
      },
    }),
  );
  if (!outcome.error) {
    throw new Error(`runAgent() resolved, expected a rejection; events: ${types(events).join(", ")}`);
  }
  const unexpected = [
    ...outcome.warnings.map((w) => `console.warn: ${w}`),
    ...outcome.errors.filter((e) => !e.startsWith("Agent execution failed:")).map((e) => `console.error: ${e}`),
  ];
  if (unexpected.length > 0) {
    throw new Error(`unexpected client output around the rejection:\n${unexpected.join("\n")}`);
  }
  return { error: outcome.error, events, warnings: outcome.warnings, errors: outcome.errors };
}

/** Lines of a server log at ERROR level, or reporting a panic. */
export function serverErrors(log) {
  return log.split("\n").filter((line) => /^\S+\s+ERROR\b|panicked/.test(line));
}

export function types(events) {
  return events.map((e) => e.type);
}

export function ofType(events, type) {
  return events.filter((e) => e.type === type);
}

let counter = 0;
export function id(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

export function userMessage(content) {
  return { id: id("user"), role: "user", content };
}

/** A new HttpAgent of the given client generation on `url`, with the first user message. */
export function newAgent(client, url, { prompt, state } = {}) {
  const agent = new client.HttpAgent({
    url,
    threadId: id(`thread-${client.tag}`),
    ...(state === undefined ? {} : { initialState: state }),
  });
  if (prompt !== undefined) agent.addMessage(userMessage(prompt));
  return agent;
}

/**
 * Starts a real `redis-server` (REDIS_SERVER_BIN, or the one on PATH) on a free loopback port
 * with no persistence, and waits until it accepts connections. Returns { url, stop() }.
 */
export async function startRedis() {
  const bin = process.env.REDIS_SERVER_BIN || "redis-server";
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawn(bin, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
      stdio: "ignore",
    });
    running.add(child);
    const exit = new Promise((resolve) => child.once("exit", () => resolve(running.delete(child))));
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      const up = await new Promise((resolve) => {
        const socket = net.connect(port, "127.0.0.1", () => {
          socket.end();
          resolve(true);
        });
        socket.once("error", () => resolve(false));
      });
      if (up) {
        return {
          url: `redis://127.0.0.1:${port}`,
          async stop() {
            child.kill("SIGKILL");
            await exit;
          },
        };
      }
      await sleep(50);
    }
    child.kill("SIGKILL");
    await exit;
  }
  throw new Error(`${bin} did not start on a free port`);
}
