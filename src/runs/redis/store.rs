//! The run log store for replicas sharing Redis: each run's log is kept in its owner's process
//! (its own readers read it there, without a round trip) and written to the shared log by the
//! owner's appender, so a reconnect or a stop on any replica finds it.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt};
use tokio_util::sync::CancellationToken;

use super::{Presence, RunKeys, SharedRun, SharedRuns, SharedWriter};
use crate::protocol::Batch;
use crate::runs::store::{MemoryRunLogs, MemoryWriter};
use crate::runs::{
    KeptRun, LogError, LogReader, Next, OnThread, RunLogStore, RunRef, RunWriter, ThreadRef,
};

/// How often a run with no reader here asks whether a reader elsewhere is still attached.
const PRESENCE_POLL: Duration = Duration::from_secs(1);

/// See the module docs.
#[derive(Debug)]
pub struct RedisRunLogs {
    here: MemoryRunLogs,
    shared: SharedRuns,
}

impl RedisRunLogs {
    pub fn new(here: MemoryRunLogs, shared: SharedRuns) -> Self {
        RedisRunLogs { here, shared }
    }
}

fn keys(run: RunRef<'_>) -> RunKeys {
    RunKeys::new(run.run_id, run.agent, run.scope)
}

impl RunLogStore for RedisRunLogs {
    /// Claims the run id in Redis first, so a run id live on another replica is refused too.
    fn open<'a>(
        &'a self,
        run: RunRef<'a>,
        stop: CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn RunWriter>, LogError>> {
        async move {
            let shared = self.shared.claim(keys(run), stop.clone()).await?;
            match self.here.open_here(run, stop) {
                Ok(here) => Ok(Box::new(BothWriter {
                    here,
                    shared: Some(shared),
                }) as Box<dyn RunWriter>),
                Err(error) => {
                    shared.abandon().await;
                    Err(error)
                }
            }
        }
        .boxed()
    }

    /// This process's latest run on the thread first; else the one Redis names.
    fn latest_on_thread<'a>(
        &'a self,
        thread: ThreadRef<'a>,
    ) -> BoxFuture<'a, Result<Option<OnThread>, LogError>> {
        async move {
            if let Some(here) = self.here.latest_here(thread) {
                return Ok(Some(here));
            }
            let found = self.shared.latest_on_thread(thread).await?;
            Ok(found.map(|(run, context)| OnThread {
                run: Box::new(KeptShared {
                    runs: self.shared.clone(),
                    run,
                }),
                context,
            }))
        }
        .boxed()
    }

    /// This process's log first; else Redis (a run another replica owns, or one this process
    /// no longer keeps).
    fn find<'a>(
        &'a self,
        run: RunRef<'a>,
    ) -> BoxFuture<'a, Result<Option<Box<dyn KeptRun>>, LogError>> {
        async move {
            if let Some(kept) = self.here.find_here(run) {
                return Ok(Some(Box::new(kept) as Box<dyn KeptRun>));
            }
            let found = self.shared.find(keys(run)).await?;
            Ok(found.map(|found| {
                Box::new(KeptShared {
                    runs: self.shared.clone(),
                    run: found,
                }) as Box<dyn KeptRun>
            }))
        }
        .boxed()
    }
}

/// A new run's log here and its appender to Redis.
struct BothWriter {
    here: MemoryWriter,
    /// `None` once given back.
    shared: Option<SharedWriter>,
}

impl RunWriter for BothWriter {
    fn start(&mut self) -> Result<Box<dyn LogReader>, LogError> {
        self.here.start()
    }

    fn append(&mut self, batch: Batch, terminal: bool) -> BoxFuture<'_, ()> {
        // Redis keeps each frame's bytes: they are made here, once, for every replica.
        // A batch with no frame (token usage alone) is not worth a round trip to Redis.
        let shared = (terminal || !batch.is_empty())
            .then_some(self.shared.as_ref())
            .flatten()
            .map(|shared| (shared, batch.frame_bytes()));
        self.here.append_here(batch, terminal);
        async move {
            if let Some((shared, frames)) = shared {
                shared.append(frames, terminal).await;
            }
        }
        .boxed()
    }

    fn on_thread(&mut self, thread_id: &str, context: Bytes) -> BoxFuture<'_, ()> {
        self.here.on_thread_here(thread_id, context.clone());
        let thread_id = thread_id.to_owned();
        async move {
            let Some(shared) = &self.shared else { return };
            let log = &self.here.log;
            let thread = ThreadRef {
                scope: log.scope(),
                agent: log.agent(),
                thread_id: &thread_id,
            };
            if let Err(error) = shared.note_thread(thread, &context).await {
                // The run goes on; only a client connecting from another replica misses it.
                tracing::warn!(%error, "could not note the run's thread in Redis");
            }
        }
        .boxed()
    }

    /// No reader here for `grace`, and none on another replica (whose readers keep a presence
    /// key fresh in Redis).
    fn abandoned(&self, grace: Duration) -> BoxFuture<'static, ()> {
        let here = self.here.abandoned(grace);
        let presence: Option<Presence> = self.shared.as_ref().map(SharedWriter::presence);
        let log = std::sync::Arc::clone(&self.here.log);
        async move {
            here.await;
            let Some(presence) = presence else { return };
            while presence.attached().await {
                // Read elsewhere: once that reader leaves, the grace period starts again.
                while presence.attached().await {
                    tokio::time::sleep(PRESENCE_POLL).await;
                }
                log.abandoned(grace).await;
            }
        }
        .boxed()
    }

    fn discard(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        let shared = self.shared.take();
        // The log here goes with its writer; Redis's claim once its appender freed the lease.
        drop(self);
        async move {
            if let Some(shared) = shared {
                shared.abandon().await;
            }
        }
        .boxed()
    }
}

/// A run found in Redis.
struct KeptShared {
    runs: SharedRuns,
    run: SharedRun,
}

impl KeptRun for KeptShared {
    fn key(&self) -> String {
        self.run.key().to_owned()
    }

    fn is_ended(&self) -> bool {
        self.run.is_ended()
    }

    fn request_stop(&self) -> BoxFuture<'_, Result<(), LogError>> {
        self.runs.request_stop(&self.run).boxed()
    }

    fn follow(
        self: Box<Self>,
        cursor: u64,
    ) -> BoxFuture<'static, Result<Box<dyn LogReader>, LogError>> {
        async move {
            let follower = self.runs.follow(self.run, cursor).await?;
            Ok(Box::new(follower) as Box<dyn LogReader>)
        }
        .boxed()
    }
}

impl LogReader for super::SharedFollower {
    fn next(&mut self, idle: Duration) -> BoxFuture<'_, Option<Next>> {
        super::SharedFollower::next(self, idle).boxed()
    }
}
