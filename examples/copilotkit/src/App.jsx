import { useCallback, useEffect, useState } from "react";
import {
  CopilotChat,
  CopilotKitProvider,
  useAgent,
  useHumanInTheLoop,
  useInterrupt,
} from "@copilotkit/react-core/v2";
import { z } from "zod";

const AGENT = "recipe";
const THREAD_KEY = "agui-host-example.recipe-thread";

/**
 * The conversation on screen, kept across reloads: its thread id lives in localStorage. Given
 * to the chat, it makes CopilotKit connect to that thread on load, which the runtime answers
 * from agui-host's thread store (server.mjs), so the chat and the recipe come back.
 */
function pageThreadId() {
  let threadId = localStorage.getItem(THREAD_KEY);
  if (!threadId) {
    threadId = crypto.randomUUID();
    localStorage.setItem(THREAD_KEY, threadId);
  }
  return threadId;
}

export function App() {
  const agent = new URLSearchParams(window.location.search).get("agent");
  if (agent === "scheduler") {
    return <SchedulerPage />;
  }
  if (agent === "weather") {
    return <WeatherPage />;
  }
  if (agent === "hotels") {
    return <HotelsPage />;
  }
  return <RecipePage />;
}

function RecipePage() {
  const [threadId, setThreadId] = useState(pageThreadId);
  // Bumped when a run ends, so the thread list shows the conversation's new title and length.
  const [listVersion, setListVersion] = useState(0);
  const choose = useCallback((id) => {
    localStorage.setItem(THREAD_KEY, id);
    setThreadId(id);
  }, []);
  const onRunEnded = useCallback(() => setListVersion((n) => n + 1), []);
  return (
    <div className="page">
      <ThreadList
        current={threadId}
        version={listVersion}
        onChoose={choose}
        onNew={() => choose(crypto.randomUUID())}
      />
      {/* One provider per conversation: switching remounts it, so CopilotKit connects to the
          chosen thread as on a page load, with nothing of the other conversation left. */}
      <Conversation key={threadId} threadId={threadId} onRunEnded={onRunEnded} />
    </div>
  );
}

/** One conversation: the chat and the recipe of thread `threadId`. */
function Conversation({ threadId, onRunEnded }) {
  // Where the latest change stands: null (none yet), "writing" (the recipe is streaming in),
  // "pending" (waiting for the person), "approved" or "rejected".
  const [phase, setPhase] = useState(null);
  const onWriting = useCallback(() => setPhase("writing"), []);
  return (
    <CopilotKitProvider runtimeUrl="/api/copilotkit" agentId={AGENT} enableInspector={false}>
      <ApprovalTool onDecision={setPhase} />
      <InputTool />
      <RunWatcher onRunEnded={onRunEnded} />
      <main className="layout">
        <RecipeView phase={phase} onWriting={onWriting} />
        <section className="chat" aria-label="Chat">
          <CopilotChat
            agentId={AGENT}
            threadId={threadId}
            labels={{
              chatInputPlaceholder: "Ask for a recipe, e.g. “make me a recipe for tacos”",
            }}
          />
        </section>
      </main>
    </CopilotKitProvider>
  );
}

/**
 * The caller's conversations with the agent, newest first, from agui-host's thread list
 * (`GET /recipe/threads`, through server.mjs): each opens its thread; "New conversation" starts
 * one. A new conversation is listed once its first run is saved.
 */
function ThreadList({ current, version, onChoose, onNew }) {
  const [threads, setThreads] = useState([]);
  useEffect(() => {
    let live = true;
    fetch("/api/threads")
      .then((response) => (response.ok ? response.json() : { threads: [] }))
      .then((body) => live && setThreads(body.threads ?? []))
      .catch(() => {});
    return () => {
      live = false;
    };
  }, [current, version]);
  return (
    <nav className="threads" aria-label="Conversations">
      <button type="button" className="new-thread" data-testid="new-thread" onClick={onNew}>
        New conversation
      </button>
      <ul>
        {threads.map((thread) => (
          <li key={thread.threadId}>
            <button
              type="button"
              className="thread"
              data-testid="thread-item"
              data-thread-id={thread.threadId}
              aria-current={thread.threadId === current ? "page" : undefined}
              onClick={() => onChoose(thread.threadId)}
            >
              <span className="thread-title">{thread.title ?? "Untitled"}</span>
              <span className="thread-meta">
                {thread.messageCount} messages{thread.status === "interrupted" ? " · waiting" : ""}
              </span>
            </button>
          </li>
        ))}
      </ul>
    </nav>
  );
}

/** Tells the page when a run of the conversation ends (finished or failed). */
function RunWatcher({ onRunEnded }) {
  const { agent } = useAgent({ agentId: AGENT });
  useEffect(() => {
    const { unsubscribe } = agent.subscribe({
      onRunFinishedEvent: () => onRunEnded(),
      onRunErrorEvent: () => onRunEnded(),
    });
    return unsubscribe;
  }, [agent, onRunEnded]);
  return null;
}

/**
 * The recipe as the shared state holds it. agui-host fills state.recipe while the model is
 * still writing update_recipe's arguments (predictive state), so this view grows field by field
 * during the run; the approval settles it: a snapshot either keeps it or puts the old one back.
 */
function RecipeView({ phase, onWriting }) {
  const { agent } = useAgent({ agentId: AGENT });
  const recipe = agent.state?.recipe;

  useEffect(() => {
    const { unsubscribe } = agent.subscribe({
      onToolCallStartEvent: ({ event }) => {
        if (event.toolCallName === "update_recipe") onWriting();
      },
    });
    return unsubscribe;
  }, [agent, onWriting]);

  let status;
  if (!recipe) status = phase === "rejected" ? "discarded" : "empty";
  else if (phase === "writing") status = "writing";
  else if (phase === "pending") status = "awaiting approval";
  else status = "saved";

  return (
    <section className="recipe" aria-label="Recipe" data-testid="recipe" data-status={status}>
      <header>
        <h1 data-testid="recipe-title">{recipe ? recipe.title || "Untitled recipe" : "No recipe yet"}</h1>
        <span className={`badge badge-${status.replace(/ /g, "-")}`} data-testid="recipe-status">
          {STATUS_LABELS[status]}
        </span>
      </header>
      {recipe ? (
        <>
          <dl className="facts">
            <div>
              <dt>Skill level</dt>
              <dd data-testid="recipe-skill">{recipe.skill_level ?? "…"}</dd>
            </div>
            <div>
              <dt>Cooking time</dt>
              <dd data-testid="recipe-time">{recipe.cooking_time ?? "…"}</dd>
            </div>
            {recipe.special_preferences?.length ? (
              <div>
                <dt>Preferences</dt>
                <dd>{recipe.special_preferences.join(", ")}</dd>
              </div>
            ) : null}
          </dl>
          <h2>Ingredients</h2>
          <ul className="ingredients" data-testid="recipe-ingredients">
            {(recipe.ingredients ?? []).map((item, i) => (
              <li key={i}>
                <span className="icon">{item?.icon ?? ""}</span>
                <span className="name">{item?.name ?? "…"}</span>
                <span className="amount">{item?.amount ?? ""}</span>
              </li>
            ))}
          </ul>
          <h2>Instructions</h2>
          <ol className="instructions" data-testid="recipe-instructions">
            {(recipe.instructions ?? []).map((step, i) => (
              <li key={i}>{step}</li>
            ))}
          </ol>
        </>
      ) : (
        <p className="hint">
          Ask the assistant on the right for a recipe. It fills in here while the agent writes
          it, and is saved once you approve.
        </p>
      )}
    </section>
  );
}

const STATUS_LABELS = {
  empty: "Empty",
  writing: "Writing…",
  "awaiting approval": "Awaiting approval",
  saved: "Saved",
  discarded: "Discarded",
};

/**
 * agui-host asks CopilotKit's client (AG-UI 0.x) for approval with a `request_approval` tool
 * call: {toolCallId, toolName, arguments, message, allowEdit}. The page renders it as a card in
 * the chat and answers {approved}; CopilotKit sends the answer as the tool's result in the next
 * run, which agui-host turns into the decision (the call itself never reaches the model).
 */
function ApprovalTool({ onDecision }) {
  useHumanInTheLoop(
    {
      name: "request_approval",
      description: "Asks the person to approve a change before it is saved.",
      parameters: z.object({
        toolCallId: z.string(),
        toolName: z.string(),
        arguments: z.record(z.string(), z.unknown()),
        message: z.string(),
        allowEdit: z.boolean(),
      }),
      render: (props) => <ApprovalCard {...props} onDecision={onDecision} />,
    },
    [onDecision],
  );
  return null;
}

function ApprovalCard({ args, status, respond, result, onDecision }) {
  const [answer, setAnswer] = useState(null);
  const waiting = status === "executing" && answer === null;
  useEffect(() => {
    if (waiting) onDecision("pending");
  }, [waiting, onDecision]);

  const decided = answer ?? decisionOf(result);
  const decide = (approved) => {
    setAnswer(approved ? "approved" : "rejected");
    onDecision(approved ? "approved" : "rejected");
    respond?.({ approved });
  };
  const recipe = args?.arguments?.recipe;

  return (
    <div className="approval" data-testid="approval-card" data-decision={decided ?? "pending"}>
      <p className="approval-question">{args?.message ?? "Approve this change?"}</p>
      {recipe?.title ? (
        <p className="approval-detail">
          {recipe.title}: {recipe.ingredients?.length ?? 0} ingredients,{" "}
          {recipe.instructions?.length ?? 0} steps
        </p>
      ) : null}
      {decided ? (
        <p className={`approval-outcome approval-${decided}`} data-testid="approval-outcome">
          {decided === "approved" ? "Approved" : "Rejected"}
        </p>
      ) : (
        <div className="approval-buttons">
          <button type="button" className="approve" disabled={!waiting} onClick={() => decide(true)}>
            Approve
          </button>
          <button type="button" className="reject" disabled={!waiting} onClick={() => decide(false)}>
            Reject
          </button>
        </div>
      )}
    </div>
  );
}

/** The decision read back from a tool result, for cards rendered from history. */
function decisionOf(result) {
  if (result === undefined || result === null) return null;
  try {
    const value = typeof result === "string" ? JSON.parse(result) : result;
    const approved = value?.approved ?? value?.accepted;
    return approved === true ? "approved" : approved === false ? "rejected" : null;
  } catch {
    return null;
  }
}

/**
 * agui-host asks CopilotKit's client (AG-UI 0.x) a question with a `request_input` tool call:
 * {toolCallId, toolName, message, responseSchema, ...} for an input tool of the agent (here
 * ask_servings) or a question an MCP server asked. The page renders a form from the schema's
 * properties and answers with the values; agui-host checks them against the schema and gives
 * them to the model as the original call's result.
 */
function InputTool() {
  useHumanInTheLoop({
    name: "request_input",
    description: "Asks the person a question and waits for the answer.",
    parameters: z
      .object({
        toolCallId: z.string(),
        toolName: z.string(),
        message: z.string(),
        responseSchema: z.record(z.string(), z.unknown()),
      })
      .passthrough(),
    render: (props) => <QuestionCard {...props} />,
  });
  return null;
}

function QuestionCard({ args, status, respond, result }) {
  const properties = Object.entries(args?.responseSchema?.properties ?? {});
  const [values, setValues] = useState({});
  const [sent, setSent] = useState(null);
  const answered = sent ?? answerOf(result);
  const waiting = status === "executing" && answered === null;
  const submit = (event) => {
    event.preventDefault();
    const answer = {};
    for (const [name, schema] of properties) {
      const raw = values[name] ?? "";
      answer[name] = schema?.type === "integer" || schema?.type === "number" ? Number(raw) : raw;
    }
    setSent(answer);
    respond?.(answer);
  };
  return (
    <form className="question" data-testid="question-card" onSubmit={submit}>
      <p className="approval-question">{args?.message ?? "A question"}</p>
      {answered ? (
        <p className="question-answer" data-testid="question-answer">
          {Object.values(answered).join(", ")}
        </p>
      ) : (
        <>
          {properties.map(([name, schema]) => (
            <label key={name} className="question-field">
              <span>{schema?.title ?? name}</span>
              <input
                name={name}
                type={schema?.type === "integer" || schema?.type === "number" ? "number" : "text"}
                min={schema?.minimum}
                max={schema?.maximum}
                disabled={!waiting}
                value={values[name] ?? ""}
                onChange={(e) => setValues((v) => ({ ...v, [name]: e.target.value }))}
              />
            </label>
          ))}
          <button type="submit" className="approve" disabled={!waiting}>
            Answer
          </button>
        </>
      )}
    </form>
  );
}

/** The answer read back from a tool result, for cards rendered from history. */
function answerOf(result) {
  if (result === undefined || result === null) return null;
  try {
    const value = typeof result === "string" ? JSON.parse(result) : result;
    return value && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

/**
 * The scheduler (`/?agent=scheduler`): its agent asks with standard AG-UI interrupts (its
 * `client_tool = false` in agent.toml), which CopilotKit's `useInterrupt` renders in the chat.
 * `resolve(payload)` answers with `resume: [{interruptId, status: "resolved", payload}]`, which
 * agui-host checks against the interrupt's responseSchema and gives the model as the call's
 * result.
 */
function SchedulerPage() {
  return (
    <CopilotKitProvider runtimeUrl="/api/copilotkit" agentId="scheduler" enableInspector={false}>
      <MeetingQuestion />
      <main className="layout scheduler">
        <section className="chat" aria-label="Chat">
          <CopilotChat
            agentId="scheduler"
            labels={{ chatInputPlaceholder: "Ask for a meeting, e.g. “schedule a meeting about the roadmap”" }}
          />
        </section>
      </main>
    </CopilotKitProvider>
  );
}

function MeetingQuestion() {
  useInterrupt({
    agentId: "scheduler",
    render: ({ interrupt, resolve, cancel }) => (
      <SlotCard interrupt={interrupt} resolve={resolve} cancel={cancel} />
    ),
  });
  return null;
}

function SlotCard({ interrupt, resolve, cancel }) {
  const [chosen, setChosen] = useState(null);
  // agui-host puts the model's arguments (here the slots it offers) in the interrupt's metadata.
  const offered = interrupt?.metadata?.["agui-host"]?.arguments?.slots ?? [];
  const slots = [...new Set(offered.filter((slot) => typeof slot === "string"))];
  const choose = (slot) => {
    setChosen(slot);
    resolve({ chosen_time: slot });
  };
  return (
    <div className="question" data-testid="interrupt-card" data-reason={interrupt?.reason}>
      <p className="approval-question">{interrupt?.message ?? "Pick a time"}</p>
      {chosen ? (
        <p className="question-answer" data-testid="interrupt-answer">{chosen}</p>
      ) : (
        <div className="approval-buttons">
          {slots.map((slot) => (
            <button key={slot} type="button" onClick={() => choose(slot)}>
              {slot}
            </button>
          ))}
          <button type="button" className="reject" onClick={() => cancel()}>
            Not now
          </button>
        </div>
      )}
    </div>
  );
}

/**
 * The weather page (`/?agent=weather`): an MCP App hosted by agui-host. Nothing here renders
 * it: the `mcp-apps` activity agui-host sends after the weather tool's result is drawn by
 * CopilotKit's built-in renderer, which reads the app's HTML and answers its calls through
 * agui-host (runs carrying `forwardedProps.__proxiedMCPRequest`).
 */
function WeatherPage() {
  return (
    <CopilotKitProvider runtimeUrl="/api/copilotkit" agentId="weather" enableInspector={false}>
      <main className="layout single">
        <section className="chat" aria-label="Chat">
          <CopilotChat
            agentId="weather"
            labels={{ chatInputPlaceholder: "Ask for the weather, e.g. “show me the weather in Paris”" }}
          />
        </section>
      </main>
    </CopilotKitProvider>
  );
}

/**
 * The hotels page (`/?agent=hotels`): A2UI surfaces from agui-host's generate_a2ui. Nothing here
 * renders them either: the runtime's A2UI middleware (server.mjs) turns the stream into
 * `a2ui-surface` activities, and CopilotKit's built-in renderer draws them with its basic
 * catalog, which it also sends to the agent as the components it may use.
 */
function HotelsPage() {
  return (
    <CopilotKitProvider runtimeUrl="/api/copilotkit" agentId="hotels" enableInspector={false}>
      <main className="layout single">
        <section className="chat" aria-label="Chat">
          <CopilotChat
            agentId="hotels"
            labels={{ chatInputPlaceholder: "Ask for a view, e.g. “compare hotels in Europe”" }}
          />
        </section>
      </main>
    </CopilotKitProvider>
  );
}
