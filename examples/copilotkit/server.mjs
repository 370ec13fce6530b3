// The example's one origin: the CopilotKit runtime under /api/copilotkit and the built page
// (dist/) everywhere else, so the browser needs no CORS. The runtime reaches its agent on
// agui-host through an AG-UI HttpAgent, server side, and picks a thread up again from
// agui-host's thread store when the page reconnects to it (AguiHostThreadRunner below, built
// with the helpers in clients/agui-host).
//
//   AGUI_HOST_URL   agui-host's base URL (default http://127.0.0.1:8080)
//   AGUI_AGENT      the agui-host route of the recipe agent (default recipe); the scheduler
//                   page's agent is agui-host's /scheduler, the weather page's /weather, the
//                   hotels page's /hotels
//   PORT, HOST      where this server listens (default 127.0.0.1:3000; PORT=0 picks a free port)

import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

// CopilotKit's runtime reports usage to its vendor unless told not to; an example phones nowhere.
// (Set before the runtime is imported, hence the dynamic imports below.)
process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";

const { HttpAgent } = await import("@ag-ui/client");
const { CopilotRuntime, InMemoryAgentRunner } = await import("@copilotkit/runtime/v2");
const { defer, switchMap } = await import("rxjs");
const { createCopilotNodeListener } = await import("@copilotkit/runtime/v2/node");
// The repository's client helpers for agui-host's threads (clients/agui-host); an app outside
// this repository installs them with `npm install <path to clients/agui-host>`.
const { withAguiHostConnect } = await import("../../clients/agui-host/index.mjs");

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DIST = path.join(HERE, "dist");
const BASE_PATH = "/api/copilotkit";

const aguiHost = (process.env.AGUI_HOST_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
const agentRoute = process.env.AGUI_AGENT || "recipe";

/**
 * CopilotKit's default runner, except when a page connects to a thread. A page that mounts with
 * a thread id asks the runtime to `connect`, and the default runner replays only the runs of
 * this very process: a restart (or another replica) would show an empty chat. agui-host keeps
 * every thread (docs/threads.md), so unless a run on the thread is streaming here (then the
 * page joins it, as by default), agui-host's connect stream answers: the thread, then the rest
 * of its run if one is still streaming there. The page's forwarded headers go along: agui-host
 * scopes threads by who asks.
 */
const AguiHostThreadRunner = withAguiHostConnect(
  InMemoryAgentRunner,
  { defer, switchMap },
  { aguiHost, agentRoute },
);

const runtime = new CopilotRuntime({
  // The page names this agent "recipe"; the runtime clones it for every run.
  // The scheduler page's agent asks with AG-UI interrupts, which its page answers through
  // CopilotKit's useInterrupt (agent.toml).
  agents: {
    recipe: new HttpAgent({ url: `${aguiHost}/${agentRoute}` }),
    scheduler: new HttpAgent({ url: `${aguiHost}/scheduler` }),
    // The weather page's agent: its MCP App is hosted by agui-host itself, so this runtime
    // is not configured with `mcpApps` (both would inject the app's tools).
    weather: new HttpAgent({ url: `${aguiHost}/weather` }),
    // The hotels page's agent: A2UI surfaces designed by agui-host's generate_a2ui, which it
    // offers because the A2UI middleware below asks for it (injectA2UITool).
    hotels: new HttpAgent({ url: `${aguiHost}/hotels` }),
  },
  // CopilotKit's A2UI middleware, for the hotels agent only: it sends the page's catalog and
  // `injectA2UITool`, and paints the surfaces from the stream. Applied here once; applying it
  // to the HttpAgent as well would paint every surface twice.
  a2ui: { agents: ["hotels"], injectA2UITool: true },
  runner: new AguiHostThreadRunner(),
});
const copilotkit = createCopilotNodeListener({ runtime, basePath: BASE_PATH });

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".woff2": "font/woff2",
};

function serveStatic(req, res) {
  const url = new URL(req.url, "http://localhost");
  let file = path.normalize(path.join(DIST, decodeURIComponent(url.pathname)));
  // Nothing outside dist/, and unknown paths get the page (it has one route).
  if (!file.startsWith(DIST + path.sep) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    file = path.join(DIST, "index.html");
  }
  if (!fs.existsSync(file)) {
    res.writeHead(500, { "content-type": "text/plain" });
    res.end("dist/ is missing: run `npm run build` first\n");
    return;
  }
  res.writeHead(200, {
    "content-type": TYPES[path.extname(file)] || "application/octet-stream",
    "cache-control": "no-cache",
  });
  fs.createReadStream(file).pipe(res);
}

/**
 * `GET /api/threads`: the caller's conversations with the agent, from agui-host's thread list
 * (docs/threads.md#the-thread-list). The page's headers go along, as for its runs: agui-host
 * scopes threads by who asks.
 */
async function listThreads(req, res) {
  const headers = {};
  for (const name of ["authorization", "cookie"]) {
    if (req.headers[name]) headers[name] = req.headers[name];
  }
  try {
    const upstream = await fetch(`${aguiHost}/${agentRoute}/threads?limit=50`, { headers });
    res.writeHead(upstream.status, { "content-type": "application/json", "cache-control": "no-store" });
    res.end(await upstream.text());
  } catch (error) {
    res.writeHead(502, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: "upstream_unreachable", message: String(error) } }));
  }
}

const server = http.createServer((req, res) => {
  const pathname = new URL(req.url, "http://localhost").pathname;
  if (pathname === "/api/threads" && req.method === "GET") {
    listThreads(req, res);
    return;
  }
  if (pathname === BASE_PATH || pathname.startsWith(`${BASE_PATH}/`)) {
    Promise.resolve(copilotkit(req, res)).catch((error) => {
      console.error("copilotkit runtime:", error);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
    return;
  }
  serveStatic(req, res);
});

const host = process.env.HOST || "127.0.0.1";
const port = Number(process.env.PORT ?? 3000);
server.listen(port, host, () => {
  const { port: bound } = server.address();
  // The test reads this line to learn the port.
  console.log(`copilotkit example on http://${host}:${bound} (agent: ${aguiHost}/${agentRoute})`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections?.();
    process.exit(0);
  });
}
