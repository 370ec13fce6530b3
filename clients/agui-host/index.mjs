// Client helpers for agui-host's threads (docs/threads.md#connect).
//
// agui-host answers `GET /<agent>/threads/<threadId>/connect` with one SSE stream: the thread's
// conversation and state, then the rest of its live run when one is running, every message
// once. These helpers put that stream where AG-UI clients look for it:
//
// - `withThreadConnect(HttpAgent)`: a subclass of the `HttpAgent` you pass (from the
//   `@ag-ui/client` your app uses, 1.0 or later) whose `connectAgent()` reads the stream, so a
//   reloaded page gets its conversation back and joins a run still streaming.
// - `withAguiHostConnect(Runner, rxjs, options)`: a subclass of a CopilotKit agent runner
//   (such as `InMemoryAgentRunner` from `@copilotkit/runtime/v2`) whose `connect` answers from
//   agui-host unless the run is streaming in this very runtime.
// - `threadConnectEvents(agentUrl, { threadId, headers })`: the connect stream's events.
//
// The classes are passed in rather than imported, so the helpers work with the client and
// runtime versions the app already has, and add no copy of them.

/** The connect route of `threadId` on the agent at `agentUrl` (its run route). */
export function connectUrl(agentUrl, threadId, { protocolVersion = "1.0" } = {}) {
  const base = agentUrl.replace(/\/+$/, "");
  const query = protocolVersion ? `?protocolVersion=${encodeURIComponent(protocolVersion)}` : "";
  return `${base}/threads/${encodeURIComponent(threadId)}/connect${query}`;
}

/**
 * An `HttpAgent` subclass whose `connect` (what `connectAgent()` runs) reads the thread's
 * connect stream through the agent's own transport: the same headers, the same `fetch`, the
 * same SSE parsing and event checks as its runs.
 */
export function withThreadConnect(HttpAgent) {
  return class AguiHostAgent extends HttpAgent {
    connect(input) {
      const url = connectUrl(this.url, input.threadId);
      const agent = this;
      // A transport of the client's own, pointed at the connect route: a GET without a body.
      const reader = new HttpAgent({
        url,
        headers: this.headers,
        fetch: (target, init) => {
          const { "Content-Type": _json, ...headers } = init.headers ?? {};
          return agent.fetch(target, {
            method: "GET",
            headers,
            signal: agent.abortController?.signal ?? init.signal,
          });
        },
      });
      return reader.run(input);
    }
  };
}

/** Each event of an SSE body (`data:` lines; comments and other fields skipped). */
export async function* sseEvents(body) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

/**
 * The events of thread `threadId`'s connect stream on the agent at `agentUrl`, as an async
 * iterable (what rxjs's `from` and `switchMap` take); nothing for a thread agui-host does not
 * know (404). `headers` go along: agui-host scopes threads by who asks.
 */
export async function* threadConnectEvents(agentUrl, { threadId, headers = {} }) {
  const url = connectUrl(agentUrl, threadId);
  const response = await fetch(url, { headers: { ...headers, accept: "text/event-stream" } });
  if (response.status === 404) return;
  if (!response.ok) throw new Error(`agui-host answered ${response.status} to GET ${url}`);
  yield* sseEvents(response.body);
}

/**
 * A CopilotKit agent runner subclass (of `Runner`, such as `InMemoryAgentRunner` from
 * `@copilotkit/runtime/v2`) whose `connect` answers a page that mounts with a thread id: a run
 * streaming in this runtime is joined as the base runner does; otherwise agui-host answers
 * with the thread and the rest of its live run, wherever that streams, so a runtime restart or
 * a second runtime replica loses nothing. `rxjs` is the app's own `{ defer, switchMap }`;
 * `aguiHost` is agui-host's base URL and `agentRoute` the agent's route there.
 */
export function withAguiHostConnect(Runner, { defer, switchMap }, { aguiHost, agentRoute }) {
  const agentUrl = `${aguiHost.replace(/\/+$/, "")}/${agentRoute}`;
  return class AguiHostRunner extends Runner {
    connect(request) {
      return defer(() => Promise.resolve(this.isRunning(request))).pipe(
        switchMap((running) =>
          running ? super.connect(request) : threadConnectEvents(agentUrl, request),
        ),
      );
    }
  };
}
