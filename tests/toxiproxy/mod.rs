//! A real fault proxy between a client and a server: toxiproxy-server
//! (built by `scripts/testenv-build.sh`, found in the testenv bin
//! directory), driven through its HTTP API. Test tooling only; the test
//! crate must also declare `mod controlplane;`.

#![allow(dead_code)] // each test target uses a part

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::controlplane::{binary, free_port, spawn_logged};

/// A running toxiproxy-server on 127.0.0.1; killed on drop.
pub(crate) struct Toxiproxy {
    child: Child,
    api_port: u16,
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Toxiproxy {
    /// Starts toxiproxy-server, logging to `log`, and waits for its API.
    pub(crate) async fn start(log: &Path) -> Self {
        let api_port = free_port();
        let child = spawn_logged(
            &binary("toxiproxy-server"),
            &[
                "-host".into(),
                "127.0.0.1".into(),
                "-port".into(),
                api_port.to_string(),
            ],
            log,
        );
        let proxy = Self { child, api_port };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some((200, _)) = proxy.try_request("GET", "/version", None).await {
                return proxy;
            }
            assert!(
                Instant::now() < deadline,
                "toxiproxy-server did not answer on port {api_port} within 20 s; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A proxy named `name` from a free 127.0.0.1 port to `upstream`
    /// (`host:port`); returns the port it listens on.
    pub(crate) async fn proxy(&self, name: &str, upstream: &str) -> u16 {
        let port = free_port();
        let body = json!({
            "name": name,
            "listen": format!("127.0.0.1:{port}"),
            "upstream": upstream,
            "enabled": true,
        });
        self.expect("POST", "/proxies", Some(body), 201).await;
        port
    }

    /// Drops every byte in both directions of `proxy`, keeping its
    /// connections open (the `timeout` toxic with timeout 0): a network
    /// path that silently loses traffic, for new and open connections.
    pub(crate) async fn blackhole(&self, proxy: &str) {
        for stream in ["upstream", "downstream"] {
            let body = json!({
                "name": format!("blackhole-{stream}"),
                "type": "timeout",
                "stream": stream,
                "toxicity": 1.0,
                "attributes": { "timeout": 0 },
            });
            self.expect("POST", &format!("/proxies/{proxy}/toxics"), Some(body), 200)
                .await;
        }
    }

    /// Removes what [`Self::blackhole`] added.
    pub(crate) async fn heal(&self, proxy: &str) {
        for stream in ["upstream", "downstream"] {
            self.expect(
                "DELETE",
                &format!("/proxies/{proxy}/toxics/blackhole-{stream}"),
                None,
                204,
            )
            .await;
        }
    }

    async fn expect(&self, method: &str, path: &str, body: Option<serde_json::Value>, code: u16) {
        let answer = self.try_request(method, path, body).await;
        assert!(
            matches!(answer, Some((c, _)) if c == code),
            "toxiproxy {method} {path}: want {code}, got {answer:?}"
        );
    }

    /// One HTTP/1.1 request to the API: (status, body), `None` when it does
    /// not answer.
    async fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Option<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.api_port))
            .await
            .ok()?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: toxiproxy\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            stream.read_to_string(&mut response),
        )
        .await
        .ok()?
        .ok()?;
        let code = response.split(' ').nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((code, body))
    }
}
