//! What only the Postgres store has, against a real PostgreSQL: migrations that replicas can
//! run at once and again, the fence in the store itself (a run superseded on another replica
//! cannot save), and the list's indexes as created. The behaviours every store shares run in
//! `threads`, `thread_list` and the other `for_each_store!` modules.

use std::time::Duration;

use agui_host::threads::postgres::{connect, schema};
use agui_host::threads::{Leases, ScopeQuota, StoreError, ThreadBackends, ThreadKey, ThreadRecord};

use crate::postgres_server::PostgresServer;

const TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn migrations_run_once_when_replicas_start_together_and_again_are_a_no_op() {
    let server = PostgresServer::start().await;
    let url = server.url();
    let (one, two) = tokio::join!(connect(&url, 2, TIMEOUT), connect(&url, 2, TIMEOUT));
    let (one, _two) = (
        one.expect("the first replica starts"),
        two.expect("so does the second"),
    );
    assert_eq!(
        schema::migrate(&one).await.unwrap(),
        0,
        "nothing left to apply"
    );

    let client = server.client().await;
    let versions: Vec<i32> = client
        .query(
            "SELECT version FROM agui_schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(versions, [1], "each migration recorded once");
    let indexes: Vec<String> = client
        .query(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'agui_threads_list'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        indexes[0].contains("(scope, agent, archived, updated_at DESC, thread_id)"),
        "{indexes:?}"
    );
}

#[tokio::test]
async fn a_url_that_leads_nowhere_is_an_error_not_a_hang() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let url = format!("postgres://agui@127.0.0.1:{port}/postgres");
    let started = std::time::Instant::now();
    assert!(connect(&url, 1, Duration::from_millis(500)).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(connect("not a url at all =", 1, TIMEOUT).await.is_err());
}

fn record(run: &str) -> ThreadRecord {
    ThreadRecord {
        agent: "a".into(),
        messages: Vec::new(),
        state: Some(serde_json::json!({"run": run})),
        interrupts: Vec::new(),
        server_results: Default::default(),
        last_run_id: run.into(),
        created_at: 1,
        updated_at: 2,
        title: None,
        archived: false,
        lineage: Default::default(),
    }
}

/// Two replicas on one database: each has its own process leases, so the older run hears
/// nothing of the newer one until its next renewal; its save must be refused all the same.
#[tokio::test]
async fn a_run_superseded_on_another_replica_saves_nothing() {
    let server = PostgresServer::start().await;
    let pool = connect(&server.url(), 4, TIMEOUT).await.unwrap();
    let replica = || {
        ThreadBackends::postgres(
            &pool,
            (Duration::from_secs(60), Duration::from_secs(30)),
            0,
            ScopeQuota::default(),
        )
    };
    let (one, two) = (replica(), replica());
    let key = ThreadKey {
        scope: "s".into(),
        agent: "a".into(),
        thread_id: "t".into(),
    };
    let older = one.leases.acquire(&key, false).await.unwrap();
    assert!(
        two.leases.acquire(&key, false).await.is_err(),
        "busy without supersede"
    );
    let newer = two.leases.acquire(&key, true).await.unwrap();
    assert!(!older.lost().is_cancelled(), "it has not heard yet");
    two.store.save(&newer, &record("newer")).await.unwrap();
    assert!(matches!(
        one.store.save(&older, &record("older")).await,
        Err(StoreError::LeaseLost)
    ));
    assert_eq!(
        one.store.load(&key).await.unwrap().map(|r| r.last_run_id),
        Some("newer".into())
    );
    // The older run's release frees nothing: the newer run still holds the thread.
    older.release().await;
    assert!(
        Leases::held(&one.leases, std::slice::from_ref(&key))
            .await
            .unwrap()[0]
    );
    newer.release().await;
    assert!(!one.leases.held(std::slice::from_ref(&key)).await.unwrap()[0]);
}
