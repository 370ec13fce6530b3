//! Background tool calls: the tasks of one agent's `background = true` tools, run by the
//! process after the run that started them has ended, and their results until the thread's
//! next run takes them.
//!
//! A task belongs to one thread of one caller (the run's scope and thread id), so another
//! user's run on the same client-chosen thread id never sees it. Everything is in this
//! process's memory: a restart or another replica knows nothing of a task, so a thread's next
//! run must reach the replica that started it to hear of its result (`docs/threads.md`,
//! "Background tools").
//!
//! Bounded three ways: tasks per thread and per agent (running, or finished and not yet
//! delivered), each task's run time (the agent's `background_timeout_secs`), and how long an
//! undelivered result is kept ([`RESULT_RETENTION`]). Dropping the registry (the agent, at
//! shutdown) aborts every running task.
//!
//! The model can cancel a task of its thread with [`CANCEL_TOOL`], which the agent offers
//! beside its background tools ([`BackgroundTasks::cancel_tool`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::{json, Value};
use tokio::task::AbortHandle;

use super::{Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

/// The tool that cancels a background task, offered to the model of an agent with background
/// tools.
pub const CANCEL_TOOL: &str = "cancel_background_task";

/// How long a finished task's result waits for the thread's next run before it is dropped.
pub const RESULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The limits of an agent's background tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackgroundLimits {
    /// Tasks of one thread, running or holding an undelivered result.
    pub per_thread: usize,
    /// Tasks of the whole agent in this process, counted the same way.
    pub per_agent: usize,
    /// Longest a task may run before it fails with a timeout.
    pub timeout: Duration,
}

impl Default for BackgroundLimits {
    fn default() -> Self {
        BackgroundLimits {
            per_thread: 16,
            per_agent: 64,
            timeout: Duration::from_secs(600),
        }
    }
}

/// Who a task belongs to: the run's scope and thread id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ThreadKey {
    pub scope: String,
    pub thread_id: String,
}

/// A call started in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCall {
    /// The task's id (`task_…`), given to the model in the call's result.
    pub task: String,
    pub tool: String,
    pub tool_call_id: String,
}

/// A task that has ended, waiting for its thread's next run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedTask {
    pub call: TaskCall,
    /// The result text, or why the call failed.
    pub outcome: Result<String, String>,
}

/// What cancelling a task found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// It was running, and is stopped: nothing of it reaches a later run.
    Stopped,
    /// It had already ended: its result still reaches the thread's next run.
    AlreadyFinished,
    /// This process holds no such task of the thread (never started here, already delivered,
    /// or started before a restart or on another replica).
    Unknown,
}

impl Cancelled {
    /// The word the cancel tool's result and the history use.
    pub fn status(self) -> &'static str {
        match self {
            Cancelled::Stopped => "cancelled",
            Cancelled::AlreadyFinished => "finished",
            Cancelled::Unknown => "unknown",
        }
    }
}

/// Why a call was not started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackgroundRefusal {
    #[error("this conversation already has {0} background tasks running or waiting to be read; wait for one to finish")]
    ThreadFull(usize),
    #[error(
        "the agent already has {0} background tasks running or waiting to be read; try again later"
    )]
    AgentFull(usize),
}

/// The background tasks of one agent. Cheap to clone; the tasks are aborted when the last
/// clone is dropped.
#[derive(Clone, Default)]
pub struct BackgroundTasks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for BackgroundTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundTasks")
            .field("tools", &self.inner.tools)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    /// The tools whose calls run in the background.
    tools: BTreeSet<String>,
    limits: BackgroundLimits,
    tasks: Mutex<Tasks>,
}

#[derive(Default)]
struct Tasks {
    threads: HashMap<ThreadKey, ThreadTasks>,
    /// Tasks of every thread, running or finished and undelivered.
    held: usize,
}

#[derive(Default)]
struct ThreadTasks {
    running: Vec<(TaskCall, AbortHandle)>,
    finished: Vec<(FinishedTask, Instant)>,
}

impl ThreadTasks {
    fn held(&self) -> usize {
        self.running.len() + self.finished.len()
    }
}

impl BackgroundTasks {
    /// The registry of an agent whose tools named in `tools` run in the background.
    pub fn new(tools: impl IntoIterator<Item = String>, limits: BackgroundLimits) -> Self {
        BackgroundTasks {
            inner: Arc::new(Inner {
                tools: tools.into_iter().collect(),
                limits,
                tasks: Mutex::default(),
            }),
        }
    }

    /// Whether the agent has background tools at all.
    pub fn any(&self) -> bool {
        !self.inner.tools.is_empty()
    }

    /// Whether calls of `tool` run in the background.
    pub fn runs(&self, tool: &str) -> bool {
        self.inner.tools.contains(tool)
    }

    /// Longest a task may run.
    pub fn timeout(&self) -> Duration {
        self.inner.limits.timeout
    }

    /// Starts `work` as a task of `key`'s thread, unless a limit is reached. The task's
    /// result is kept for [`BackgroundTasks::take_finished`]. Needs a Tokio runtime.
    ///
    /// # Errors
    /// The thread or the agent has as many tasks as its limit allows.
    pub fn start(
        &self,
        key: ThreadKey,
        call: TaskCall,
        work: BoxFuture<'static, Result<String, String>>,
    ) -> Result<(), BackgroundRefusal> {
        let limits = self.inner.limits;
        let mut tasks = self.inner.lock();
        tasks.expire(Instant::now());
        let thread_held = tasks.threads.get(&key).map_or(0, ThreadTasks::held);
        if thread_held >= limits.per_thread {
            return Err(BackgroundRefusal::ThreadFull(limits.per_thread));
        }
        if tasks.held >= limits.per_agent {
            return Err(BackgroundRefusal::AgentFull(limits.per_agent));
        }
        // The task holds the registry weakly: it must not keep the agent's tasks alive after
        // the agent is gone, and nobody is left to read its result then.
        let registry: Weak<Inner> = Arc::downgrade(&self.inner);
        let (task_key, task_call) = (key.clone(), call.clone());
        let timeout = limits.timeout;
        // Held until the task is registered, so a task that ends at once finds itself there.
        let handle = tokio::spawn(async move {
            let outcome = match tokio::time::timeout(timeout, work).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!(
                    "the background task did not finish within {} seconds",
                    timeout.as_secs()
                )),
            };
            if let Some(registry) = registry.upgrade() {
                registry.finish(&task_key, &task_call, outcome);
            }
        });
        tasks.held += 1;
        tasks
            .threads
            .entry(key)
            .or_default()
            .running
            .push((call, handle.abort_handle()));
        Ok(())
    }

    /// The tasks of `key`'s thread that have ended since it last asked, oldest first; each is
    /// handed out once.
    pub fn take_finished(&self, key: &ThreadKey) -> Vec<FinishedTask> {
        let mut tasks = self.inner.lock();
        tasks.expire(Instant::now());
        let Some(thread) = tasks.threads.get_mut(key) else {
            return Vec::new();
        };
        let finished: Vec<FinishedTask> = thread.finished.drain(..).map(|(f, _)| f).collect();
        if thread.running.is_empty() {
            tasks.threads.remove(key);
        }
        tasks.held -= finished.len();
        finished
    }

    /// Stops `task` of `key`'s thread if it still runs; a stopped task is forgotten (its slot
    /// is free again), a finished one is left for the thread's next run.
    pub fn cancel(&self, key: &ThreadKey, task: &str) -> Cancelled {
        let mut tasks = self.inner.lock();
        let Some(thread) = tasks.threads.get_mut(key) else {
            return Cancelled::Unknown;
        };
        if thread.finished.iter().any(|(f, _)| f.call.task == task) {
            return Cancelled::AlreadyFinished;
        }
        let Some(at) = thread.running.iter().position(|(c, _)| c.task == task) else {
            return Cancelled::Unknown;
        };
        let (_, handle) = thread.running.swap_remove(at);
        handle.abort();
        if thread.held() == 0 {
            tasks.threads.remove(key);
        }
        tasks.held -= 1;
        Cancelled::Stopped
    }

    /// The tool the model cancels a task of its thread with. It holds the tasks weakly: a
    /// registry holding its own tool would never be dropped, and its tasks never aborted.
    pub fn cancel_tool(&self) -> std::sync::Arc<dyn Tool> {
        std::sync::Arc::new(CancelTool {
            tasks: Arc::downgrade(&self.inner),
            definition: ToolDefinition::new(
                CANCEL_TOOL,
                "Cancels a background task of this conversation that is still running, by the `task` id its tool's call returned. A cancelled task's result never arrives.",
                json!({
                    "type": "object",
                    "properties": {"task": {"type": "string", "maxLength": 64}},
                    "required": ["task"],
                    "additionalProperties": false,
                }),
            ),
        })
    }

    /// The calls of `key`'s thread still running.
    pub fn running(&self, key: &ThreadKey) -> Vec<TaskCall> {
        let tasks = self.inner.lock();
        tasks.threads.get(key).map_or_else(Vec::new, |thread| {
            thread
                .running
                .iter()
                .map(|(call, _)| call.clone())
                .collect()
        })
    }
}

/// [`CANCEL_TOOL`]: its result is `{task, status, note}`, `status` one of
/// [`Cancelled::status`]'s words.
struct CancelTool {
    tasks: Weak<Inner>,
    definition: ToolDefinition,
}

impl Tool for CancelTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let outcome = (|| {
            let task = arguments["task"]
                .as_str()
                .ok_or_else(|| ToolError::InvalidArguments("`task` must be a string".into()))?;
            let tasks = self
                .tasks
                .upgrade()
                .ok_or_else(|| ToolError::Failed("the agent is shutting down".into()))?;
            let key = ThreadKey {
                scope: context.scope,
                thread_id: context.thread_id,
            };
            let cancelled = BackgroundTasks { inner: tasks }.cancel(&key, task);
            let note = match cancelled {
                Cancelled::Stopped => "The task is stopped; its result will not arrive.",
                Cancelled::AlreadyFinished => {
                    "The task had already finished; its result arrives in the next turn."
                }
                Cancelled::Unknown => {
                    "No running task of this conversation has that id here: it may have finished and been reported already, or been lost."
                }
            };
            Ok(ToolOutput::from(json!({
                "task": task,
                "status": cancelled.status(),
                "note": note,
            })))
        })();
        futures_util::future::ready(outcome).boxed()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        // A panic while the lock was held left counts, never half-written memory: go on.
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn finish(&self, key: &ThreadKey, call: &TaskCall, outcome: Result<String, String>) {
        let mut tasks = self.lock();
        let Some(thread) = tasks.threads.get_mut(key) else {
            return;
        };
        let Some(at) = thread.running.iter().position(|(c, _)| c.task == call.task) else {
            return;
        };
        let (call, _) = thread.running.swap_remove(at);
        thread
            .finished
            .push((FinishedTask { call, outcome }, Instant::now()));
    }
}

impl Tasks {
    /// Drops results nobody came for within [`RESULT_RETENTION`].
    fn expire(&mut self, now: Instant) {
        let mut dropped = 0;
        self.threads.retain(|_, thread| {
            let before = thread.finished.len();
            thread
                .finished
                .retain(|(_, at)| now.duration_since(*at) < RESULT_RETENTION);
            dropped += before - thread.finished.len();
            thread.held() > 0
        });
        self.held -= dropped;
    }
}

impl Drop for Inner {
    /// Shutdown (or a rebuilt agent): the running tasks are aborted, not left to finish for
    /// nobody.
    fn drop(&mut self) {
        let tasks = self.lock();
        for thread in tasks.threads.values() {
            for (_, handle) in &thread.running {
                handle.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn key(thread: &str) -> ThreadKey {
        ThreadKey {
            scope: "s".into(),
            thread_id: thread.into(),
        }
    }

    fn call(task: &str) -> TaskCall {
        TaskCall {
            task: task.into(),
            tool: "report".into(),
            tool_call_id: format!("call_{task}"),
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_result_is_handed_out_once_to_its_own_thread() {
        let tasks = BackgroundTasks::new(["report".to_owned()], BackgroundLimits::default());
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let work = async move {
            let _ = released.await;
            Ok("12 pages".to_owned())
        };
        tasks.start(key("t1"), call("a"), work.boxed()).unwrap();
        settle().await;
        assert!(tasks.take_finished(&key("t1")).is_empty());
        assert_eq!(tasks.running(&key("t1")), vec![call("a")]);
        release.send(()).unwrap();
        settle().await;
        assert!(tasks.take_finished(&key("t2")).is_empty(), "another thread");
        let finished = tasks.take_finished(&key("t1"));
        assert_eq!(
            finished,
            vec![FinishedTask {
                call: call("a"),
                outcome: Ok("12 pages".into())
            }]
        );
        assert!(tasks.take_finished(&key("t1")).is_empty(), "once");
        assert_eq!(tasks.inner.lock().held, 0);
    }

    #[tokio::test]
    async fn the_limits_count_running_and_unread_tasks() {
        let limits = BackgroundLimits {
            per_thread: 2,
            per_agent: 3,
            timeout: Duration::from_secs(60),
        };
        let tasks = BackgroundTasks::new(["report".to_owned()], limits);
        let done = || async { Ok::<_, String>("x".to_owned()) }.boxed();
        tasks.start(key("t1"), call("a"), done()).unwrap();
        tasks.start(key("t1"), call("b"), done()).unwrap();
        settle().await;
        assert_eq!(
            tasks.start(key("t1"), call("c"), done()),
            Err(BackgroundRefusal::ThreadFull(2)),
            "finished but unread still counts"
        );
        tasks.start(key("t2"), call("d"), done()).unwrap();
        assert_eq!(
            tasks.start(key("t3"), call("e"), done()),
            Err(BackgroundRefusal::AgentFull(3))
        );
        assert_eq!(tasks.take_finished(&key("t1")).len(), 2);
        tasks.start(key("t1"), call("f"), done()).unwrap();
    }

    #[tokio::test]
    async fn a_task_past_its_timeout_fails_and_dropping_the_registry_aborts_tasks() {
        let limits = BackgroundLimits {
            timeout: Duration::from_millis(20),
            ..BackgroundLimits::default()
        };
        let tasks = BackgroundTasks::new(["report".to_owned()], limits);
        let never = futures_util::future::pending::<Result<String, String>>();
        tasks.start(key("t1"), call("a"), never.boxed()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let finished = tasks.take_finished(&key("t1"));
        assert!(finished[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .contains("did not finish"));

        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        struct Signal(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Signal {
            fn drop(&mut self) {
                let _ = self.0.take().map(|s| s.send(()));
            }
        }
        let signal = Signal(Some(dropped_tx));
        let work = async move {
            let _signal = signal;
            futures_util::future::pending::<()>().await;
            Ok("never".to_owned())
        };
        let tasks = BackgroundTasks::new(["report".to_owned()], BackgroundLimits::default());
        tasks.start(key("t1"), call("b"), work.boxed()).unwrap();
        settle().await;
        drop(tasks);
        tokio::time::timeout(Duration::from_secs(2), dropped_rx)
            .await
            .expect("the task was aborted")
            .unwrap();
    }

    #[tokio::test]
    async fn cancelling_stops_a_running_task_and_frees_its_slot_but_leaves_a_finished_one() {
        let limits = BackgroundLimits {
            per_thread: 1,
            ..BackgroundLimits::default()
        };
        let tasks = BackgroundTasks::new(["report".to_owned()], limits);
        let never = futures_util::future::pending::<Result<String, String>>();
        tasks.start(key("t1"), call("a"), never.boxed()).unwrap();
        assert_eq!(
            tasks.cancel(&key("t2"), "a"),
            Cancelled::Unknown,
            "another thread"
        );
        assert_eq!(tasks.cancel(&key("t1"), "a"), Cancelled::Stopped);
        assert_eq!(tasks.cancel(&key("t1"), "a"), Cancelled::Unknown, "once");
        assert!(tasks.running(&key("t1")).is_empty());
        assert_eq!(tasks.inner.lock().held, 0);

        let done = async { Ok::<_, String>("x".to_owned()) }.boxed();
        tasks.start(key("t1"), call("b"), done).unwrap();
        settle().await;
        assert_eq!(tasks.cancel(&key("t1"), "b"), Cancelled::AlreadyFinished);
        assert_eq!(tasks.take_finished(&key("t1")).len(), 1);
    }

    #[tokio::test]
    async fn the_cancel_tool_answers_for_its_own_thread() {
        let tasks = BackgroundTasks::new(["report".to_owned()], BackgroundLimits::default());
        let never = futures_util::future::pending::<Result<String, String>>();
        tasks.start(key("t1"), call("a"), never.boxed()).unwrap();
        let tool = tasks.cancel_tool();
        let context = |thread: &str| ToolContext {
            scope: "s".into(),
            agent: "assistant".into(),
            thread_id: thread.into(),
            run_id: "r".into(),
            tool_call_id: "c".into(),
            message_id: None,
            state: None,
            progress: None,
            events: None,
            input: None,
        };
        let other = tool
            .call(json!({"task": "a"}), context("t2"))
            .await
            .unwrap();
        assert_eq!(other.content["status"], "unknown");
        let own = tool
            .call(json!({"task": "a"}), context("t1"))
            .await
            .unwrap();
        assert_eq!(own.content["status"], "cancelled");
        drop(tasks);
        assert!(matches!(
            tool.call(json!({"task": "a"}), context("t1")).await,
            Err(ToolError::Failed(_))
        ));
    }
}
