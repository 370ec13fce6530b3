//! A real `redis-server` for the thread-store tests: started on a free loopback port with no
//! persistence (`--save "" --appendonly no`), killed when dropped. `REDIS_SERVER_BIN` swaps in
//! another binary (e.g. `valkey-server`).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug)]
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`. A port taken between choosing it and
    /// the server binding it is retried with another.
    pub(crate) async fn start() -> RedisServer {
        let binary = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {binary} (apt-get install redis-server): {e}")
                });
            if answers_ping(port).await {
                return RedisServer { child, port };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("{binary} did not start on a free port");
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends one inline command and returns the first line of the reply (e.g. `+OK`).
    pub(crate) async fn command(&self, command: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("redis answers");
        stream
            .write_all(format!("{command}\r\n").as_bytes())
            .await
            .unwrap();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while stream.read_exact(&mut byte).await.is_ok() && byte[0] != b'\n' {
            reply.push(byte[0]);
        }
        String::from_utf8_lossy(&reply).trim_end().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Whether a server on `port` answers `PING` within about five seconds.
async fn answers_ping(port: u16) -> bool {
    for _ in 0..100 {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let mut reply = [0u8; 7];
            if stream.write_all(b"PING\r\n").await.is_ok()
                && stream.read_exact(&mut reply).await.is_ok()
                && &reply == b"+PONG\r\n"
            {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
