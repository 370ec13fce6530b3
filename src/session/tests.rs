//! The session against a test double of each backend trait: a thread store, a lease store, a
//! decision ledger and a run log store that only record what they are asked. A run sees the
//! backends through these traits alone, so what holds here holds for any store kind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{self, StreamExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{DisconnectPolicy, OnDisconnect, Resumable, StreamBufferLimits};
use super::{NewRun, Refused, RunBody, RunLimits, RunObserver, Sessions, Shutdown};
use crate::agent::testing::{request, ScriptedAgent};
use crate::agent::{Agent, AgentError, AgentStream, AgentUpdate, RunRequest};
use crate::protocol::Batch;
use crate::protocol::EventBody;
use crate::runs::{
    KeptRun, LogError, LogReader, Next, OnThread, RunLogStore, RunRef, RunWriter, ThreadRef,
};
use crate::threads::{
    ConcurrentRunPolicy, DecisionKey, DecisionLedger, HistoryPolicy, Lease, LeaseError, Leases,
    SharedLeases, StoreError, ThreadBackends, ThreadKey, ThreadPolicies, ThreadRecord, ThreadStore,
    Threads,
};

/// A thread store that keeps every save and has no records to load.
#[derive(Debug, Default)]
struct RecordingStore {
    saved: Mutex<Vec<ThreadRecord>>,
}

impl ThreadStore for RecordingStore {
    fn load<'a>(
        &'a self,
        _key: &'a ThreadKey,
    ) -> BoxFuture<'a, Result<Option<ThreadRecord>, StoreError>> {
        std::future::ready(Ok(None)).boxed()
    }

    fn save<'a>(
        &'a self,
        _lease: &'a Lease,
        record: &'a ThreadRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.saved.lock().unwrap().push(record.clone());
        std::future::ready(Ok(())).boxed()
    }

    fn delete<'a>(&'a self, _key: &'a ThreadKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        std::future::ready(Ok(false)).boxed()
    }

    fn list<'a>(
        &'a self,
        _query: &'a crate::threads::ListQuery,
    ) -> BoxFuture<'a, Result<crate::threads::ThreadPage, StoreError>> {
        std::future::ready(Ok(crate::threads::ThreadPage::default())).boxed()
    }
}

/// A shared lease store that grants every lease and refuses every renewal.
#[derive(Debug, Default)]
struct ForgetfulLeases {
    taken: Mutex<Vec<String>>,
    released: Mutex<Vec<String>>,
}

impl SharedLeases for ForgetfulLeases {
    fn take<'a>(
        &'a self,
        key: &'a ThreadKey,
        _token: &'a str,
        _supersede: bool,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.taken.lock().unwrap().push(key.thread_id.clone());
        std::future::ready(Ok(())).boxed()
    }

    fn renew<'a>(
        &'a self,
        _key: &'a ThreadKey,
        _token: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        std::future::ready(Ok(false)).boxed()
    }

    fn held<'a>(&'a self, keys: &'a [ThreadKey]) -> BoxFuture<'a, Result<Vec<bool>, StoreError>> {
        std::future::ready(Ok(vec![false; keys.len()])).boxed()
    }

    fn release<'a>(&'a self, key: &'a ThreadKey, _token: &'a str) -> BoxFuture<'a, ()> {
        self.released.lock().unwrap().push(key.thread_id.clone());
        std::future::ready(()).boxed()
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(3)
    }
}

/// A decision ledger that keeps the keys it was asked to claim.
#[derive(Debug, Default)]
struct RecordingLedger {
    claimed: Mutex<Vec<(String, String)>>,
}

impl DecisionLedger for RecordingLedger {
    fn claim<'a>(
        &'a self,
        key: DecisionKey<'a>,
        _keep: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let entry = (key.thread.thread_id.clone(), key.tool_call_id.to_owned());
        let mut claimed = self.claimed.lock().unwrap();
        let first = !claimed.contains(&entry);
        claimed.push(entry);
        std::future::ready(Ok(first)).boxed()
    }

    fn is_claimed<'a>(&'a self, key: DecisionKey<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        let entry = (key.thread.thread_id.clone(), key.tool_call_id.to_owned());
        let claimed = self.claimed.lock().unwrap().contains(&entry);
        std::future::ready(Ok(claimed)).boxed()
    }
}

/// A run log store holding one run's batches in a vector; its readers read the vector.
#[derive(Debug, Default)]
struct VecLogs {
    run: Arc<VecLog>,
    opened: Mutex<Vec<String>>,
}

#[derive(Debug, Default)]
struct VecLog {
    batches: Mutex<Vec<(Bytes, bool)>>,
    /// The threads the run was noted on.
    threads: Mutex<Vec<String>>,
    appended: watch::Sender<usize>,
    discarded: Mutex<bool>,
}

impl RunLogStore for VecLogs {
    fn open<'a>(
        &'a self,
        run: RunRef<'a>,
        _stop: CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn RunWriter>, LogError>> {
        self.opened.lock().unwrap().push(run.run_id.to_owned());
        let writer = VecWriter(Arc::clone(&self.run));
        std::future::ready(Ok(Box::new(writer) as Box<dyn RunWriter>)).boxed()
    }

    fn find<'a>(
        &'a self,
        _run: RunRef<'a>,
    ) -> BoxFuture<'a, Result<Option<Box<dyn KeptRun>>, LogError>> {
        std::future::ready(Ok(None)).boxed()
    }

    fn latest_on_thread<'a>(
        &'a self,
        _thread: ThreadRef<'a>,
    ) -> BoxFuture<'a, Result<Option<OnThread>, LogError>> {
        std::future::ready(Ok(None)).boxed()
    }
}

struct VecWriter(Arc<VecLog>);

impl RunWriter for VecWriter {
    fn start(&mut self) -> Result<Box<dyn LogReader>, LogError> {
        Ok(Box::new(VecReader {
            log: Arc::clone(&self.0),
            appended: self.0.appended.subscribe(),
            next: 0,
        }))
    }

    fn append(&mut self, batch: Batch, terminal: bool) -> BoxFuture<'_, ()> {
        // A log of bytes: what the session hands a store reads as the frames it wrote.
        self.0
            .batches
            .lock()
            .unwrap()
            .push((batch.to_bytes(), terminal));
        self.0.appended.send_modify(|n| *n += 1);
        std::future::ready(()).boxed()
    }

    fn on_thread(&mut self, thread_id: &str, _context: Bytes) -> BoxFuture<'_, ()> {
        self.0.threads.lock().unwrap().push(thread_id.to_owned());
        std::future::ready(()).boxed()
    }

    fn abandoned(&self, _grace: Duration) -> BoxFuture<'static, ()> {
        std::future::pending().boxed()
    }

    fn discard(self: Box<Self>) -> BoxFuture<'static, ()> {
        *self.0.discarded.lock().unwrap() = true;
        std::future::ready(()).boxed()
    }
}

struct VecReader {
    log: Arc<VecLog>,
    appended: watch::Receiver<usize>,
    next: usize,
}

impl LogReader for VecReader {
    fn next(&mut self, _idle: Duration) -> BoxFuture<'_, Option<Next>> {
        async move {
            loop {
                let batch = self.log.batches.lock().unwrap().get(self.next).cloned();
                if let Some((bytes, last)) = batch {
                    self.next += 1;
                    return Some(Next::Frames { bytes, last });
                }
                if self.next > 0 && self.log.batches.lock().unwrap()[self.next - 1].1 {
                    return None;
                }
                self.appended.changed().await.ok()?;
            }
        }
        .boxed()
    }
}

/// An agent whose run never produces anything: it runs until something ends it.
struct SilentAgent;

impl Agent for SilentAgent {
    fn run(&self, _request: RunRequest) -> Result<AgentStream, AgentError> {
        Ok(stream::pending().boxed())
    }
}

fn sessions(threads: Option<Threads>, runs: Option<Resumable>) -> Arc<Sessions> {
    Arc::new(Sessions {
        threads: threads.map(Arc::new),
        runs: runs.map(Arc::new),
        limits: RunLimits::new(0, 1, None),
        shutdown: Shutdown::new(),
        keep_alive: Duration::from_secs(15),
        stream_buffer: StreamBufferLimits {
            max_bytes: 1 << 20,
            slow_client_timeout: Duration::from_secs(5),
        },
    })
}

fn threads_over(
    store: Arc<RecordingStore>,
    leases: Leases,
    ledger: Arc<RecordingLedger>,
) -> Threads {
    let backends = ThreadBackends {
        store,
        leases,
        ledger,
    };
    let policies = ThreadPolicies {
        ttl: Duration::from_secs(60),
        history: HistoryPolicy::Verify,
        on_concurrent_run: ConcurrentRunPolicy::Reject,
        scope_header: None,
    };
    Threads::new(backends, policies, Default::default())
}

fn text_reply() -> ScriptedAgent {
    ScriptedAgent::new(vec![
        AgentUpdate::Event(EventBody::text_start("m")),
        AgentUpdate::Event(EventBody::text_content("m", "hello")),
        AgentUpdate::Event(EventBody::text_end("m")),
    ])
}

async fn open(
    sessions: &Arc<Sessions>,
    agent: &dyn Agent,
    scope: Option<&str>,
) -> Result<RunBody, Refused> {
    let session = sessions
        .open(NewRun {
            agent,
            agent_name: "default",
            thread_scope: scope.map(str::to_owned),
            request: request(None),
            asks_to_continue: false,
            span: tracing::Span::none(),
        })
        .await?;
    Ok(session.stream(Box::new(NoMetrics)))
}

fn policy() -> DisconnectPolicy {
    DisconnectPolicy {
        on_disconnect: OnDisconnect::Auto,
        grace: Duration::from_secs(30),
        max_readers: (8, 1024),
    }
}

struct NoMetrics;
impl RunObserver for NoMetrics {}

async fn body_text(mut body: RunBody) -> String {
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk.expect("a chunk")).unwrap());
    }
    text
}

#[tokio::test]
async fn a_run_on_a_thread_is_saved_through_the_store_before_its_terminal_event_leaves() {
    let store = Arc::new(RecordingStore::default());
    let ledger = Arc::new(RecordingLedger::default());
    let threads = threads_over(Arc::clone(&store), Leases::local(), ledger);
    let sessions = sessions(Some(threads), None);
    let agent = text_reply();
    let mut body = open(&sessions, &agent, Some("s")).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        let chunk = String::from_utf8(chunk.unwrap().to_vec()).unwrap();
        if chunk.contains("RUN_FINISHED") {
            let saved = store.saved.lock().unwrap();
            assert_eq!(saved.len(), 1, "saved before the terminal event left");
            let messages = serde_json::to_string(&saved[0].messages).unwrap();
            assert!(messages.contains("hello"), "{messages}");
        }
        text.push_str(&chunk);
    }
    assert!(text.contains("RUN_FINISHED"), "{text}");
}

#[tokio::test]
async fn a_runs_decision_claims_reach_the_ledger_keyed_by_its_thread() {
    let store = Arc::new(RecordingStore::default());
    let ledger = Arc::new(RecordingLedger::default());
    let threads = threads_over(store, Leases::local(), Arc::clone(&ledger));
    let sessions = sessions(Some(threads), None);
    let agent = text_reply();
    body_text(open(&sessions, &agent, Some("s")).await.unwrap()).await;
    let claims = agent
        .last_request()
        .decision_claims
        .expect("a run on a thread claims");
    assert!(claims.claim("call-1", "tag", None).await.unwrap());
    assert!(!claims.claim("call-1", "tag", None).await.unwrap(), "once");
    assert!(claims.is_claimed("call-1", "tag").await.unwrap());
    let claimed = ledger.claimed.lock().unwrap().clone();
    assert_eq!(claimed[0], ("t".to_owned(), "call-1".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_shared_lease_that_cannot_be_renewed_ends_the_run_as_superseded_and_is_released() {
    let leases = Arc::new(ForgetfulLeases::default());
    let store = Arc::new(RecordingStore::default());
    let threads = threads_over(
        Arc::clone(&store),
        Leases::shared(Arc::clone(&leases) as Arc<dyn SharedLeases>),
        Arc::new(RecordingLedger::default()),
    );
    let sessions = sessions(Some(threads), None);
    let text = body_text(open(&sessions, &SilentAgent, Some("s")).await.unwrap()).await;
    assert!(text.contains("\"code\":\"thread_superseded\""), "{text}");
    assert_eq!(*leases.taken.lock().unwrap(), ["t"]);
    // The lease is released as the run ends; a run that lost it saves nothing.
    assert_eq!(*leases.released.lock().unwrap(), ["t"]);
    assert!(store.saved.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_logged_run_writes_every_batch_to_its_log_store_and_answers_from_it() {
    let logs = Arc::new(VecLogs::default());
    let runs = Resumable::new(Arc::clone(&logs) as Arc<dyn RunLogStore>, policy());
    let threads = threads_over(
        Arc::new(RecordingStore::default()),
        Leases::local(),
        Arc::new(RecordingLedger::default()),
    );
    let sessions = sessions(Some(threads), Some(runs));
    let agent = text_reply();
    let text = body_text(open(&sessions, &agent, Some("s")).await.unwrap()).await;
    assert_eq!(*logs.opened.lock().unwrap(), ["r"]);
    let logged: String = logs
        .run
        .batches
        .lock()
        .unwrap()
        .iter()
        .map(|(bytes, _)| String::from_utf8(bytes.to_vec()).unwrap())
        .collect();
    assert_eq!(text, logged, "the response is what the log holds");
    assert!(logged.starts_with("id: r:1\n"), "{logged}");
    assert!(logged.contains("RUN_FINISHED"), "{logged}");
    assert!(!*logs.run.discarded.lock().unwrap());
    assert_eq!(
        *logs.run.threads.lock().unwrap(),
        ["t"],
        "the log is told which thread the run is on, for clients connecting to it"
    );
}

#[tokio::test]
async fn a_refused_run_gives_its_reserved_id_back_to_the_log_store() {
    struct Refusing;
    impl Agent for Refusing {
        fn run(&self, _request: RunRequest) -> Result<AgentStream, AgentError> {
            Err(AgentError::InvalidInput {
                code: "invalid_state",
                message: "no".into(),
            })
        }
    }
    let logs = Arc::new(VecLogs::default());
    let runs = Resumable::new(Arc::clone(&logs) as Arc<dyn RunLogStore>, policy());
    let threads = threads_over(
        Arc::new(RecordingStore::default()),
        Leases::local(),
        Arc::new(RecordingLedger::default()),
    );
    let sessions = sessions(Some(threads), Some(runs));
    let refused = open(&sessions, &Refusing, Some("s"))
        .await
        .err()
        .expect("refused");
    assert!(matches!(refused, Refused::Agent(_)), "{refused:?}");
    assert!(*logs.run.discarded.lock().unwrap(), "the id was given back");
}
