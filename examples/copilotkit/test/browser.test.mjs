// The browser test of the CopilotKit example: Debian's Chromium, driven by playwright-core,
// opens the page served by server.mjs, whose CopilotKit runtime reaches the recipe agent on a
// real agui-host (offline model, examples/copilotkit/agent.toml). It types a request, sees the
// recipe fill in while the tool call streams (predictive state), answers the approval card, and
// checks what each answer does; then that a reload, and a restart of the runtime, bring the
// conversation back from agui-host's thread store, and that it goes on; that the thread list
// switches between two conversations; and that a question of the agent (an input tool) is
// answered through the page, both as a `request_input` tool call and, on the scheduler page,
// as an AG-UI interrupt through CopilotKit's own useInterrupt; and that an MCP App hosted by
// agui-host (the weather card of examples/mcp_test_server.rs) renders in the chat through
// CopilotKit's own renderer and reaches its server through agui-host; and that A2UI surfaces
// designed by agui-host's generate_a2ui are painted by CopilotKit's A2UI middleware and
// renderer, an invalid one never, and a failure shown. Screenshots go to artifacts/
// (ARTIFACTS_DIR).
//
//   AGUI_HOST_BIN         the agui-host binary (default: target/debug/agui-host of the repository)
//   MCP_TEST_SERVER_BIN   the weather app's MCP server (default: examples/mcp_test_server beside
//                         the agui-host binary)
//   CHROMIUM_BIN          the browser (default /usr/bin/chromium)
//
// scripts/browser-test.sh builds the page and the binary first, then runs this.

import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const EXAMPLE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const REPO_ROOT = path.resolve(EXAMPLE_DIR, "..", "..");
const ARTIFACTS = path.resolve(EXAMPLE_DIR, process.env.ARTIFACTS_DIR || "artifacts");
const AGENT_TOML = path.join(EXAMPLE_DIR, "agent.toml");
const PROMPT = "make me a recipe for tacos";
// Where the page (src/App.jsx) keeps its thread id.
const THREAD_KEY = "agui-host-example.recipe-thread";

// Chromium as the machine's closed network needs it: no sandbox (tests run as root), and none
// of the background connections (updates, sync, QUIC probes) that would only be refused.
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const children = new Set();
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

async function freePort() {
  const server = net.createServer();
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts a child process; resolves once `ready(output)` holds, rejects if it exits first. */
function startProcess(name, command, args, { env, cwd, ready, timeoutMs = 30_000 }) {
  const child = spawn(command, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  let output = "";
  const log = () => output;
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => {
    children.delete(child);
    resolve({ code, signal });
  }));
  const started = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${output}`)), timeoutMs);
    const check = async (data) => {
      output += data;
      const value = await ready(output);
      if (value !== undefined) {
        clearTimeout(timer);
        resolve(value);
      }
    };
    child.stdout.on("data", check);
    child.stderr.on("data", check);
    exited.then((status) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${JSON.stringify(status)}):\n${output}`));
    });
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    }
  };
  return { started, stop, log };
}

/** agui-host with the example's agent and the offline model: nothing of the caller's setup. */
async function startAguiHost() {
  const bin = path.resolve(REPO_ROOT, process.env.AGUI_HOST_BIN || "target/debug/agui-host");
  if (!fs.existsSync(bin)) {
    throw new Error(`agui-host binary ${bin} not found: run scripts/browser-test.sh, or set AGUI_HOST_BIN`);
  }
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith("OPENAI_") || k.startsWith("APP_") || k === "HOST" || k === "PORT") continue;
    env[k] = v;
  }
  const port = await freePort();
  Object.assign(env, { HOST: "127.0.0.1", PORT: String(port), APP_CONFIG_FILE: agentToml(bin) });
  const url = `http://127.0.0.1:${port}`;
  const proc = startProcess("agui-host", bin, [], {
    env,
    cwd: REPO_ROOT,
    ready: (output) => (/agui-host listening/.test(output) ? url : undefined),
  });
  await proc.started;
  const deadline = Date.now() + 10_000;
  while (!(await healthy(url))) {
    if (Date.now() > deadline) throw new Error(`agui-host is not healthy:\n${proc.log()}`);
    await sleep(100);
  }
  return { url, ...proc };
}

/**
 * agent.toml with the weather app's MCP server where this build put it: the file names
 * target/debug/examples/mcp_test_server, and the binaries under test may live elsewhere.
 */
function agentToml(bin) {
  const server = path.resolve(
    REPO_ROOT,
    process.env.MCP_TEST_SERVER_BIN || path.join(path.dirname(bin), "examples", "mcp_test_server"),
  );
  if (!fs.existsSync(server)) {
    throw new Error(`the MCP test server ${server} is not built: cargo build --example mcp_test_server, or set MCP_TEST_SERVER_BIN`);
  }
  const configured = 'command = "target/debug/examples/mcp_test_server"';
  const text = fs.readFileSync(AGENT_TOML, "utf8");
  assert.ok(text.includes(configured), "agent.toml names the weather app's server");
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, "agent.toml");
  fs.writeFileSync(file, text.replace(configured, `command = ${JSON.stringify(server)}`));
  return file;
}

async function healthy(url) {
  try {
    const res = await fetch(`${url}/health`);
    return res.ok;
  } catch {
    return false;
  }
}

/**
 * A model writes a recipe over seconds; the offline model at once, so the whole stream would
 * reach the page in one piece. This proxy between the runtime and agui-host passes the stream
 * on one event every `delayMs`, as a real model would pace it, so the page can show (and the
 * test can see) the recipe filling in.
 */
async function startPacingProxy(target, delayMs) {
  const server = http.createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const headers = { ...req.headers };
      for (const h of ["host", "connection", "content-length", "transfer-encoding"]) delete headers[h];
      const upstream = await fetch(`${target}${req.url}`, {
        method: req.method,
        headers,
        body: chunks.length ? Buffer.concat(chunks) : undefined,
      });
      const out = {};
      upstream.headers.forEach((value, key) => {
        if (!["content-length", "content-encoding", "transfer-encoding", "connection"].includes(key)) out[key] = value;
      });
      res.writeHead(upstream.status, out);
      if (!upstream.body) return res.end();
      const decoder = new TextDecoder();
      let pending = "";
      for await (const chunk of upstream.body) {
        pending += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = pending.indexOf("\n\n")) >= 0) {
          res.write(pending.slice(0, end + 2));
          pending = pending.slice(end + 2);
          await sleep(delayMs);
        }
      }
      res.end(pending);
    } catch (error) {
      if (!res.headersSent) res.writeHead(502);
      res.end(String(error));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    stop: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}

/** server.mjs; `port` 0 picks a free one (a restart passes the old one: same origin, same storage). */
async function startExampleServer(aguiHostUrl, port = 0) {
  const env = { ...process.env, PORT: String(port), HOST: "127.0.0.1", AGUI_HOST_URL: aguiHostUrl };
  const proc = startProcess("server.mjs", process.execPath, ["server.mjs"], {
    env,
    cwd: EXAMPLE_DIR,
    ready: (output) => output.match(/copilotkit example on (http:\/\/\S+)/)?.[1],
  });
  const url = await proc.started;
  return { url, ...proc };
}

/**
 * Records what the recipe view shows after every DOM change, so the test can tell that the
 * recipe was on screen half-written before the approval card came.
 */
function recordRecipeFrames() {
  window.__frames = [];
  const text = (id) => document.querySelector(`[data-testid="${id}"]`)?.textContent ?? "";
  const count = (id) => document.querySelectorAll(`[data-testid="${id}"] > li`).length;
  const snap = () => {
    const frame = {
      status: document.querySelector('[data-testid="recipe"]')?.dataset.status ?? "",
      title: text("recipe-title"),
      ingredients: count("recipe-ingredients"),
      instructions: count("recipe-instructions"),
      instructionsText: text("recipe-instructions").length,
      card: document.querySelectorAll('[data-testid="approval-card"]').length,
    };
    const last = window.__frames.at(-1);
    if (!last || JSON.stringify(last) !== JSON.stringify(frame)) window.__frames.push(frame);
  };
  new MutationObserver(snap).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
}

describe("CopilotKit example in Chromium", () => {
  let aguiHost;
  let proxy;
  let example;
  let browser;

  before(async () => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    aguiHost = await startAguiHost();
    proxy = await startPacingProxy(aguiHost.url, 40);
    example = await startExampleServer(proxy.url);
    // playwright-core starts the browser with a fresh temporary profile (--user-data-dir).
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium",
      headless: true,
      args: CHROMIUM_ARGS,
    });
  });

  after(async () => {
    await browser?.close();
    await example?.stop();
    await proxy?.stop();
    await aguiHost?.stop();
    if (process.env.VERBOSE) {
      console.log(`--- agui-host log\n${aguiHost?.log()}\n--- server.mjs log\n${example?.log()}`);
    }
  });

  /**
   * A fresh page (its own CopilotKit thread) that fails the test on any page error, console
   * error, or request that leaves loopback.
   */
  /** Each page's open requests to the runtime (see openPage). */
  const pendingRuntimeRequests = new WeakMap();

  async function openPage(t, at = "/") {
    const context = await browser.newContext({ viewport: { width: 1000, height: 640 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    const problems = [];
    page.on("pageerror", (error) => problems.push(`pageerror: ${error.stack ?? error}`));
    page.on("console", (msg) => {
      if (msg.type() === "error") problems.push(`console.error: ${msg.text()}`);
    });
    page.on("request", (req) => {
      const { hostname } = new URL(req.url());
      if (!["127.0.0.1", "localhost"].includes(hostname) && !req.url().startsWith("data:")) {
        problems.push(`request off loopback: ${req.method()} ${req.url()}`);
      }
    });
    // The page's requests to the runtime still open: a restart waits for them (see
    // restartExampleServer).
    const open = new Set();
    page.on("request", (req) => {
      if (new URL(req.url()).pathname.startsWith("/api/")) open.add(req);
    });
    page.on("requestfinished", (req) => open.delete(req));
    page.on("requestfailed", (req) => open.delete(req));
    pendingRuntimeRequests.set(page, open);
    await page.addInitScript(recordRecipeFrames);
    t.after(async () => {
      await context.close();
    });
    await page.goto(new URL(at, example.url).href);
    await page.getByTestId("copilot-chat-textarea").waitFor();
    return { page, problems };
  }

  /** The chat's messages (the thread list beside it shows the same first messages as titles). */
  function chatOf(page) {
    return page.locator('section[aria-label="Chat"]');
  }

  async function reloadPage(page) {
    await page.reload();
    await page.getByTestId("copilot-chat-textarea").waitFor();
  }

  /**
   * Stops server.mjs (the CopilotKit runtime, and all it kept in memory) and starts it again,
   * once `page` has no request to it open: a page shows a reloaded conversation a moment
   * before its connect response has ended, and a restart cutting that response would be a
   * network error of the test's own making.
   */
  async function restartExampleServer(page) {
    const open = pendingRuntimeRequests.get(page);
    const deadline = Date.now() + 10_000;
    while (open.size > 0 && Date.now() < deadline) await sleep(20);
    assert.equal(open.size, 0, `requests to the runtime still open: ${[...open].map((r) => r.url())}`);
    const { port } = new URL(example.url);
    await example.stop();
    example = await startExampleServer(proxy.url, Number(port));
  }

  /** The page's thread as agui-host stores it (straight from agui-host, not via the runtime). */
  async function storedThread(page) {
    const threadId = await page.evaluate((key) => localStorage.getItem(key), THREAD_KEY);
    assert.ok(threadId, "the page keeps a thread id");
    const response = await fetch(`${aguiHost.url}/recipe/threads/${encodeURIComponent(threadId)}`);
    assert.equal(response.status, 200, `agui-host has thread ${threadId}`);
    return response.json();
  }

  async function shot(page, name) {
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`) });
  }

  /**
   * Types the request and waits for the approval card; returns the frames seen until then. A
   * failure says what the page showed and what agui-host logged, since a timeout alone does not.
   */
  async function askForRecipe(page, name) {
    try {
      await sendMessage(page, PROMPT);
      // Some ingredients are on screen, the rest of the recipe is still to come; the screenshot
      // is best effort (a starved renderer may paint the last steps at once), the frames are
      // what assertStreamedIn judges.
      await page.waitForFunction(
        () =>
          window.__frames.some((f) => f.status === "writing" && f.ingredients >= 2) ||
          document.querySelector('[data-testid="approval-card"]'),
        null,
        { timeout: 30_000 },
      );
      await shot(page, `${name}-1-filling-in`);

      const card = page.getByTestId("approval-card");
      await card.getByRole("button", { name: "Approve" }).waitFor({ timeout: 30_000 });
      await shot(page, `${name}-2-approval`);
      return page.evaluate(() => window.__frames);
    } catch (error) {
      await shot(page, `${name}-failed`).catch(() => {});
      const frames = await page.evaluate(() => window.__frames).catch(() => "unavailable");
      const text = await page.locator("body").innerText().catch(() => "unavailable");
      error.message +=
        `\n--- recipe frames\n${JSON.stringify(frames)}\n--- page text\n${text}` +
        `\n--- agui-host log (last 40 lines)\n${aguiHost.log().split("\n").slice(-40).join("\n")}` +
        `\n--- server.mjs log (last 40 lines)\n${example.log().split("\n").slice(-40).join("\n")}`;
      throw error;
    }
  }

  /**
   * Sends a chat message. The textarea appears before CopilotKit has connected to its runtime;
   * an Enter pressed in that window can leave the text in place and send nothing, so the
   * message counts as sent once the textarea is cleared, and Enter is pressed again until it is.
   */
  async function sendMessage(page, text) {
    const textarea = page.getByTestId("copilot-chat-textarea");
    await textarea.fill(text);
    const deadline = Date.now() + 20_000;
    for (;;) {
      await textarea.press("Enter");
      try {
        await page.waitForFunction(
          () => document.querySelector('[data-testid="copilot-chat-textarea"]')?.value === "",
          null,
          { timeout: 2_000 },
        );
        return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`the chat never took the message: ${error.message}`);
      }
    }
  }

  /** Waits for the recipe view to show a status (it follows the card by one render). */
  async function recipeStatus(page, status) {
    await page.locator(`[data-testid="recipe"][data-status="${status}"]`).waitFor({ timeout: 5_000 });
  }

  /** Approves the pending card and waits for the answer the model gives once update_recipe ran. */
  async function approveAndWaitForAnswer(page) {
    await page.getByTestId("approval-card").getByRole("button", { name: "Approve" }).click();
    await page.getByTestId("approval-outcome").filter({ hasText: "Approved" }).waitFor();
    // agui-host's confirmation text, then the model's answer after update_recipe ran.
    await page.getByText("Recipe saved.").waitFor();
    await page.getByText("The tool returned: Recipe updated.").waitFor();
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    await recipeStatus(page, "saved");
  }

  /** After a reload: the approved run is on screen again, as the chat and as the recipe. */
  async function expectApprovedRunShown(page) {
    await chatOf(page).getByText(PROMPT).waitFor();
    await page.getByTestId("approval-outcome").filter({ hasText: "Approved" }).waitFor();
    await page.getByText("Recipe saved.").waitFor();
    await page.getByText("The tool returned: Recipe updated.").waitFor();
    await recipeStatus(page, "saved");
    await expectFullRecipe(page);
  }

  async function expectFullRecipe(page) {
    await assertText(page.getByTestId("recipe-title"), /Tacos/);
    assert.equal(await page.getByTestId("recipe-ingredients").locator("li").count(), 3);
    assert.equal(await page.getByTestId("recipe-instructions").locator("li").count(), 3);
  }

  async function assertText(locator, pattern) {
    const text = await locator.textContent();
    assert.match(text ?? "", pattern);
  }

  /**
   * The recipe was on screen half-written, and grew, before it was complete, and complete before
   * the approval card came: predictive state, applied as it streamed. (Each count usually shows
   * 1, 2, 3 in turn; a busy machine may paint two steps at once, so only growth is required.)
   */
  function assertStreamedIn(frames) {
    const beforeCard = frames.filter((f) => f.card === 0 && f.status === "writing");
    const why = `frames before the approval card: ${JSON.stringify(beforeCard)}`;
    for (const key of ["ingredients", "instructions"]) {
      const counts = beforeCard.map((f) => f[key]);
      assert.ok(counts.some((n) => n > 0 && n < 3), `${key}: never half-written; ${why}`);
      assert.ok(counts.every((n, i) => i === 0 || n >= counts[i - 1]), `${key} shrank; ${why}`);
    }
    const partial = new Set(
      beforeCard.filter((f) => f.ingredients < 3 || f.instructions < 3).map((f) => `${f.ingredients}/${f.instructions}`),
    );
    assert.ok(partial.size >= 3, `expected the recipe to grow in several steps; ${why}`);
    assert.ok(
      beforeCard.some((f) => f.title === "Tacos" && f.ingredients === 3 && f.instructions === 3),
      `the complete recipe is on screen before the question; ${why}`,
    );
  }

  test("approve: the predicted recipe is committed and update_recipe runs", async (t) => {
    const { page, problems } = await openPage(t);
    await shot(page, "0-empty");
    const frames = await askForRecipe(page, "approve");
    assertStreamedIn(frames);
    if (process.env.VERBOSE) console.log(frames);

    await assertText(page.getByTestId("approval-card"), /Save this recipe\?/);
    await recipeStatus(page, "awaiting approval");
    await expectFullRecipe(page);

    await approveAndWaitForAnswer(page);
    await expectFullRecipe(page);
    await shot(page, "approve-3-saved");

    assert.deepEqual(problems, []);
  });

  test("a question: the page answers the agent's request_input through a form, once", async (t) => {
    const { page, problems } = await openPage(t);
    await sendMessage(page, "how many servings?");
    const card = page.getByTestId("question-card");
    await card.getByText("How many people is the recipe for?").waitFor({ timeout: 30_000 });
    await card.getByLabel("Servings").fill("4");
    await shot(page, "question-1-asked");
    await card.getByRole("button", { name: "Answer" }).click();
    // The answer is the original call's result, which the model reads back.
    await page.getByText('The tool returned: {"servings":4}').waitFor({ timeout: 30_000 });
    await page.getByTestId("question-answer").filter({ hasText: "4" }).waitFor();
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    await shot(page, "question-2-answered");

    // agui-host kept the call's one result; the question itself never became a message of
    // the model's conversation.
    const thread = await storedThread(page);
    const asked = thread.messages
      .flatMap((m) => m.toolCalls ?? [])
      .find((c) => c.function.name === "ask_servings");
    assert.ok(asked, JSON.stringify(thread.messages, null, 1));
    const results = thread.messages.filter((m) => m.role === "tool" && m.toolCallId === asked.id);
    assert.deepEqual(results.map((m) => m.content), ['{"servings":4}'], JSON.stringify(thread.messages, null, 1));

    // A reload shows the answered question, and the conversation goes on without asking again.
    await reloadPage(page);
    await page.getByText('The tool returned: {"servings":4}').waitFor();
    await sendMessage(page, "thanks");
    await page.getByText(/You said: "thanks"/).waitFor({ timeout: 30_000 });
    assert.equal(await page.getByTestId("question-card").getByRole("button", { name: "Answer" }).count(), 0);

    assert.deepEqual(problems, []);
  });

  test("an interrupt: CopilotKit's useInterrupt answers the scheduler's question with resume", async (t) => {
    const { page, problems } = await openPage(t, "/?agent=scheduler");
    await sendMessage(page, "schedule a meeting about the roadmap");
    const card = page.getByTestId("interrupt-card");
    await card.waitFor({ timeout: 30_000 });
    assert.equal(await card.getAttribute("data-reason"), "input_required");
    await assertText(card, /Pick a time for roadmap/);
    await shot(page, "interrupt-1-asked");
    const slot = card.getByRole("button").first();
    const chosen = await slot.textContent();
    await slot.click();
    // The answer came back as `resume`, checked and given to the model as the call's result.
    await page.getByText(`The tool returned: {"chosen_time":"${chosen}"}`).waitFor({ timeout: 30_000 });
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    await shot(page, "interrupt-2-answered");
    assert.deepEqual(problems, []);
  });

  /** The frame of the MCP App's own document (inside CopilotKit's sandbox proxy), once loaded. */
  async function appFrame(page) {
    const deadline = Date.now() + 30_000;
    for (;;) {
      for (const frame of page.frames()) {
        if (await frame.locator('[data-testid="weather-report"]').count().catch(() => 0)) return frame;
      }
      if (Date.now() > deadline) throw new Error(`no MCP App frame:\n${aguiHost.log().slice(-4000)}`);
      await sleep(100);
    }
  }

  test("an MCP App hosted by agui-host renders in the chat, and its button reaches the server through agui-host", async (t) => {
    const { page, problems } = await openPage(t, "/?agent=weather");
    await sendMessage(page, "show me the weather in Paris");
    // CopilotKit's renderer draws the mcp-apps activity as a sandboxed iframe...
    await page.getByTestId("mcp-app-iframe").waitFor({ timeout: 30_000 });
    // ...whose HTML it read through agui-host, and which got the tool's result.
    const app = await appFrame(page);
    await app.getByTestId("weather-report").filter({ hasText: "Sunny in Paris, 21 °C" }).waitFor({ timeout: 30_000 });
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    await shot(page, "mcp-app-1-rendered");

    // The card calls weather_refresh, a tool only the app may call, through agui-host.
    await app.getByTestId("weather-refresh").click();
    await app.getByTestId("weather-refreshed").filter({ hasText: "Still sunny in Paris, 21 °C" }).waitFor({ timeout: 30_000 });
    await shot(page, "mcp-app-2-refreshed");

    // The app's requests were no turns: agui-host's one weather thread holds the one question,
    // the call and its app, and nothing of the requests.
    const { threads } = await (await fetch(`${aguiHost.url}/weather/threads`)).json();
    assert.equal(threads.length, 1, JSON.stringify(threads));
    const thread = await (await fetch(`${aguiHost.url}/weather/threads/${encodeURIComponent(threads[0].threadId)}`)).json();
    const roles = thread.messages.map((m) => m.role);
    assert.deepEqual(roles.filter((r) => r === "user"), ["user"], JSON.stringify(thread.messages));
    assert.equal(thread.messages.filter((m) => m.activityType === "mcp-apps").length, 1, JSON.stringify(roles));
    assert.equal(thread.runs.length, 1, JSON.stringify(thread.runs));

    // The conversation goes on after the app, with the app's activity in the history.
    await sendMessage(page, "thanks for the card");
    await expectReplyTo(page, "thanks for the card");
    assert.equal(await page.getByTestId("mcp-app-iframe").count(), 1, "the app stays on screen");
    assert.deepEqual(problems, []);
  });

  /** The last A2UI surface `surfaceId` painted in the chat, once it shows every text. */
  async function surfaceShowing(page, surfaceId, texts) {
    const surface = page.locator(`[data-surface-id="${surfaceId}"]`).last();
    for (const text of texts) {
      await surface.getByText(text).first().waitFor({ timeout: 30_000 });
    }
    return surface;
  }

  test("A2UI: agui-host's generate_a2ui designs surfaces the page paints, recovers from an invalid one, and fails cleanly", async (t) => {
    const { page, problems } = await openPage(t, "/?agent=hotels");
    // The runtime's A2UI middleware asks agui-host for generate_a2ui and sends the page's
    // catalog; the inner render_a2ui call's surface is painted by CopilotKit's renderer.
    await sendMessage(page, "compare hotels in Europe");
    await surfaceShowing(page, "hotel-comparison", ["The Ritz", "Holiday Inn", "Boutique Loft", "$450/night"]);
    await page.getByText("Here it is.").first().waitFor({ timeout: 20_000 });
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    await shot(page, "a2ui-1-painted");

    // The first tree for luxury hotels fails agui-host's check (its card is missing): it is
    // never painted, the retry is, in the same place.
    await sendMessage(page, "compare luxury hotels");
    await page.getByText("Here it is.").nth(1).waitFor({ timeout: 30_000 });
    assert.equal(await page.locator('[data-surface-id="hotel-comparison"]').count(), 2);
    await surfaceShowing(page, "hotel-comparison", ["The Ritz", "Boutique Loft"]);

    // No attempt for broken hotels passes: the page shows the failure, and the chat goes on.
    await sendMessage(page, "compare broken hotels");
    await page.getByText("Couldn't generate the UI").first().waitFor({ timeout: 30_000 });
    await page.getByText("I could not build that view").first().waitFor({ timeout: 20_000 });
    assert.equal(await page.locator('[data-surface-id="hotel-comparison"]').count(), 2, "no faulty surface");
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    await shot(page, "a2ui-2-failed");
    await sendMessage(page, "thanks anyway");
    await expectReplyTo(page, "thanks anyway");
    assert.deepEqual(problems, []);
  });

  test("reject: the prediction is taken back and update_recipe never runs", async (t) => {
    const { page, problems } = await openPage(t);
    const frames = await askForRecipe(page, "reject");
    assertStreamedIn(frames);

    await page.getByTestId("approval-card").getByRole("button", { name: "Reject" }).click();
    await page.getByTestId("approval-outcome").filter({ hasText: "Rejected" }).waitFor();
    await page.getByText("Recipe discarded.").waitFor();
    // The snapshot that opens the answer puts the state from before the request back.
    await recipeStatus(page, "discarded");
    await assertText(page.getByTestId("recipe-title"), /No recipe yet/);
    // The model hears that the person declined; the tool's own answer never comes.
    await page.getByText(/declined/).waitFor();
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
    assert.equal(await page.getByText("Recipe updated.").count(), 0);
    await shot(page, "reject-3-discarded");

    assert.deepEqual(problems, []);
  });

  test("reload and runtime restart: the conversation comes back from agui-host and goes on", async (t) => {
    const { page, problems } = await openPage(t);
    await askForRecipe(page, "restore");
    await approveAndWaitForAnswer(page);

    await reloadPage(page);
    await expectApprovedRunShown(page);
    await shot(page, "restore-1-reloaded");

    // The runtime's memory is gone; only agui-host still has the thread.
    await restartExampleServer(page);
    await reloadPage(page);
    await expectApprovedRunShown(page);
    await shot(page, "restore-2-runtime-restarted");

    // It goes on: the offline model numbers its tool calls by the ones it sees in the history
    // (call_offline_<n>), so a second update_recipe call numbered 2 means the model got the
    // first one, which this page only has from agui-host.
    await sendMessage(page, "make me a recipe for burritos");
    await page.getByTestId("approval-card").last().getByRole("button", { name: "Approve" }).waitFor({ timeout: 30_000 });
    await recipeStatus(page, "awaiting approval");
    await assertText(page.getByTestId("recipe-title"), /Burritos/);
    const thread = await storedThread(page);
    const calls = thread.messages
      .flatMap((message) => message.toolCalls ?? [])
      .filter((call) => call.function.name === "update_recipe")
      .map((call) => call.id);
    assert.deepEqual(calls, ["call_offline_1", "call_offline_2"]);
    const users = thread.messages.filter((message) => message.role === "user").map((message) => message.content);
    assert.deepEqual(users, [PROMPT, "make me a recipe for burritos"]);
    await shot(page, "restore-3-goes-on");

    assert.deepEqual(problems, []);
  });

  test("reload while the approval waits: the card comes back, and approving it runs update_recipe once", async (t) => {
    const { page, problems } = await openPage(t);
    await askForRecipe(page, "pending");

    await reloadPage(page);
    await chatOf(page).getByText(PROMPT).waitFor();
    await recipeStatus(page, "awaiting approval");
    await expectFullRecipe(page);
    await shot(page, "pending-1-reloaded");

    await approveAndWaitForAnswer(page);
    await expectFullRecipe(page);
    const { messages } = await storedThread(page);
    const updates = messages.filter((message) => message.role === "tool" && message.content === "Recipe updated.");
    assert.equal(updates.length, 1, JSON.stringify(messages));

    assert.deepEqual(problems, []);
  });

  /** Waits until the chat shows the offline model's reply to `said`, and is idle again. */
  async function expectReplyTo(page, said) {
    await page.getByText(`You said: "${said}"`).waitFor({ timeout: 20_000 });
    await page.waitForFunction(() => !document.querySelector('[data-testid="copilot-loading-cursor"]'));
  }

  /** The thread list's item titled `title`. */
  function threadItem(page, title) {
    return page.getByTestId("thread-item").filter({ hasText: title });
  }

  test("two conversations: the thread list switches between them, and after a reload the second goes on", async (t) => {
    const { page, problems } = await openPage(t);
    const chat = chatOf(page);
    const first = "hello from the first conversation";
    const second = "hello from the second conversation";
    await sendMessage(page, first);
    await expectReplyTo(page, first);
    await threadItem(page, first).waitFor();

    await page.getByTestId("new-thread").click();
    await page.getByTestId("copilot-chat-textarea").waitFor();
    assert.equal(await chat.getByText(first).count(), 0, "a new conversation starts empty");
    await sendMessage(page, second);
    await expectReplyTo(page, second);
    await threadItem(page, second).waitFor();
    assert.equal(await threadItem(page, first).count(), 1);
    await shot(page, "threads-1-two");

    // Back to the first: its messages, none of the second's.
    await threadItem(page, first).click();
    await page.getByText(`You said: "${first}"`).waitFor();
    assert.equal(await chat.getByText(second).count(), 0);
    assert.equal(await threadItem(page, first).getAttribute("aria-current"), "page");
    // And to the second again.
    await threadItem(page, second).click();
    await page.getByText(`You said: "${second}"`).waitFor();
    assert.equal(await chat.getByText(first).count(), 0);

    // A reload keeps the second on screen, and it goes on.
    await reloadPage(page);
    await page.getByText(`You said: "${second}"`).waitFor();
    assert.equal(await chat.getByText(first).count(), 0);
    await sendMessage(page, "and once more");
    await expectReplyTo(page, "and once more");
    await threadItem(page, second).filter({ hasText: "4 messages" }).waitFor();
    const thread = await storedThread(page);
    const users = thread.messages.filter((message) => message.role === "user").map((message) => message.content);
    assert.deepEqual(users, [second, "and once more"]);
    assert.equal(await threadItem(page, first).filter({ hasText: "2 messages" }).count(), 1);
    await shot(page, "threads-2-goes-on");

    assert.deepEqual(problems, []);
  });
});
