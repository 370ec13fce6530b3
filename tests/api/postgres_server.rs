//! A real PostgreSQL server for the thread-store tests, from Debian's `postgresql` package (its
//! binaries under `/usr/lib/postgresql/<version>/bin`, found without PATH; `PG_BIN_DIR` names
//! another directory). One data directory is made with `initdb` per test binary and copied for
//! each server, which then starts on a free loopback port with durability off (the tests need
//! none of it) and is stopped when dropped. Postgres refuses to run as root, so as root the
//! server runs as the package's `postgres` user.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The superuser `initdb` makes; the servers trust every local connection.
const USER: &str = "agui";

#[derive(Debug)]
pub(crate) struct PostgresServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl PostgresServer {
    /// Starts a server on a copy of the template cluster and waits until it answers a query.
    pub(crate) async fn start() -> PostgresServer {
        let template = template();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "agui-pg-{}-{port}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            let copied = Command::new("cp")
                .arg("-a")
                .arg(template)
                .arg(&dir)
                .status()
                .expect("cp runs");
            assert!(copied.success(), "could not copy the template cluster");
            let child = as_server_user(Command::new(bin("postgres")))
                .arg("-D")
                .arg(&dir)
                .arg("-k")
                .arg(&dir)
                .args(["-p", &port.to_string()])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("postgres starts");
            let server = PostgresServer { child, port, dir };
            if server.answers().await {
                return server;
            }
            drop(server);
        }
        panic!("postgres did not start on a free port");
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// A connection of the test's own, to look at or change the database behind the app.
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("postgres answers");
        tokio::spawn(connection);
        client
    }

    /// Whether the server answers a query within about ten seconds.
    async fn answers(&self) -> bool {
        for _ in 0..200 {
            if let Ok((client, connection)) =
                tokio_postgres::connect(&self.url(), tokio_postgres::NoTls).await
            {
                tokio::spawn(connection);
                if client.simple_query("SELECT 1").await.is_ok() {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // SIGQUIT: the immediate shutdown, which ends every backend too.
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory of the server's binaries: `PG_BIN_DIR`, else the newest installed version.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("PG_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL is installed (apt-get install postgresql)")
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions
            .pop()
            .expect("a PostgreSQL server under /usr/lib/postgresql")
            .1
    })
}

fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// The uid and gid of the package's `postgres` user, when running as root.
fn server_user() -> Option<(u32, u32)> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    if !root {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let line = passwd
        .lines()
        .find(|line| line.starts_with("postgres:"))
        .expect("the postgres user (apt-get install postgresql makes it)");
    let fields: Vec<&str> = line.split(':').collect();
    Some((fields[2].parse().unwrap(), fields[3].parse().unwrap()))
}

fn as_server_user(mut command: Command) -> Command {
    static USER_IDS: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    if let Some((uid, gid)) = *USER_IDS.get_or_init(server_user) {
        command.gid(gid).uid(uid);
    }
    command
}

/// The cluster every server copies, made by `initdb` once per version and owner and kept in
/// the temp directory for later runs (made under another name and renamed, so a run that
/// stops half-way leaves no broken template).
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let version = bin_dir()
            .parent()
            .and_then(Path::file_name)
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Owned by whoever runs the servers: root's runs and a developer's never share one.
        let owner = if server_user().is_some() {
            "postgres"
        } else {
            "self"
        };
        let dir = std::env::temp_dir().join(format!("agui-pg-template-{version}-{owner}"));
        if dir.join("PG_VERSION").exists() {
            return dir;
        }
        let fresh = std::env::temp_dir().join(format!("agui-pg-initdb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&fresh);
        let status = as_server_user(Command::new(bin("initdb")))
            .arg("-D")
            .arg(&fresh)
            .args([
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb runs");
        assert!(status.success(), "initdb failed");
        if std::fs::rename(&fresh, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&fresh);
        }
        dir
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}
