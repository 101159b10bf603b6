//! Throwaway NATS servers with JetStream: one node, or a three-node JetStream cluster on
//! loopback ports, with fault injection (`kill -9` a node, start it again).
//!
//! The binary is `$NATS_SERVER`, else `nats-server` on `PATH`, else `/usr/sbin/nats-server`
//! (Debian's `nats-server` package, which `.ci/run` installs when missing). Each node gets
//! its own temporary JetStream store, client port, cluster port and monitoring port; the
//! kit waits until every node answers `/healthz` and, for a cluster, until the JetStream
//! meta group has a leader, so a test can create an R3 stream at once. Dropping the server
//! kills its processes and removes the stores.
//!
//! ```no_run
//! # async fn demo() -> cdc_testkit::Result<()> {
//! let cluster = cdc_testkit::NatsCluster::start(3).await?;
//! let url = cluster.url(); // nats://127.0.0.1:p1,nats://127.0.0.1:p2,...
//! cluster.kill9(1)?; // a node dies mid-stream
//! cluster.restart(1).await?; // and comes back with its store
//! # let _ = url;
//! # Ok(())
//! # }
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster::HOST;
use crate::cluster::ports::{release_port, reserve_port};
use crate::error::{Error, IoContext, Result};

/// Environment variable naming the `nats-server` binary to use.
pub const NATS_SERVER_ENV: &str = "NATS_SERVER";

/// How long a node may take to become healthy.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One node's fixed identity: its ports and store survive restarts.
#[derive(Debug)]
struct Node {
    name: String,
    client_port: u16,
    cluster_port: u16,
    http_port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Mutex<Option<Child>>,
}

/// A JetStream server: a single node, or a cluster of nodes that route to each other.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<Node>,
    binary: PathBuf,
    _dir: tempfile::TempDir,
}

/// The `nats-server` binary: [`NATS_SERVER_ENV`], `PATH`, then Debian's location.
pub fn nats_server_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(NATS_SERVER_ENV) {
        return Ok(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    if let Some(path) = on_path {
        return Ok(path);
    }
    let debian = PathBuf::from("/usr/sbin/nats-server");
    if debian.is_file() {
        return Ok(debian);
    }
    Err(Error::Config(
        "nats-server not found: install it (`apt-get install nats-server`) or set NATS_SERVER to the binary"
            .into(),
    ))
}

impl NatsCluster {
    /// Starts `nodes` JetStream nodes (1 for a single server; 3 for a cluster that can hold
    /// R3 streams) and waits until they are ready.
    pub async fn start(nodes: usize) -> Result<NatsCluster> {
        if nodes == 0 {
            return Err(Error::Config(
                "a NATS cluster needs at least one node".into(),
            ));
        }
        let binary = nats_server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("pgcdc-nats-")
            .tempdir()
            .ctx(|| "create a temporary directory for nats-server".to_string())?;
        let mut list = Vec::with_capacity(nodes);
        for i in 0..nodes {
            list.push(Node {
                name: format!("n{}", i + 1),
                client_port: reserve_port()?,
                cluster_port: reserve_port()?,
                http_port: reserve_port()?,
                config: dir.path().join(format!("n{}.conf", i + 1)),
                log: dir.path().join(format!("n{}.log", i + 1)),
                child: Mutex::new(None),
            });
        }
        let routes: Vec<String> = list
            .iter()
            .map(|n| format!("nats-route://{HOST}:{}", n.cluster_port))
            .collect();
        for node in &list {
            let store = dir.path().join(format!("{}-store", node.name));
            let mut conf = format!(
                "server_name: {name}\nlisten: {HOST}:{client}\nhttp: {HOST}:{http}\n\
                 max_payload: 8MB\n\
                 jetstream {{\n  store_dir: {store:?}\n  max_memory_store: 256MB\n  max_file_store: 4GB\n}}\n",
                name = node.name,
                client = node.client_port,
                http = node.http_port,
            );
            if nodes > 1 {
                conf.push_str(&format!(
                    "cluster {{\n  name: pgcdc-test\n  listen: {HOST}:{}\n  routes: [{}]\n}}\n",
                    node.cluster_port,
                    routes.join(", ")
                ));
            }
            std::fs::write(&node.config, conf)
                .ctx(|| format!("write {}", node.config.display()))?;
        }
        let cluster = NatsCluster {
            nodes: list,
            binary,
            _dir: dir,
        };
        for i in 0..nodes {
            cluster.spawn(i)?;
        }
        for i in 0..nodes {
            cluster.wait_healthy(i).await?;
        }
        if nodes > 1 {
            cluster.wait_for_meta_leader().await?;
        }
        Ok(cluster)
    }

    /// A single JetStream server.
    pub async fn single() -> Result<NatsCluster> {
        NatsCluster::start(1).await
    }

    fn node(&self, i: usize) -> Result<&Node> {
        self.nodes
            .get(i)
            .ok_or_else(|| Error::Config(format!("no NATS node {i}")))
    }

    fn spawn(&self, i: usize) -> Result<()> {
        let node = self.node(i)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .ctx(|| format!("open {}", node.log.display()))?;
        let err = log
            .try_clone()
            .ctx(|| format!("open {}", node.log.display()))?;
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&node.config)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .ctx(|| format!("start {}", self.binary.display()))?;
        *node.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        Ok(())
    }

    /// The client URL of every node, comma-separated (what a client connects to).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://{HOST}:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client URL of node `i` alone.
    pub fn node_url(&self, i: usize) -> Result<String> {
        Ok(format!("nats://{HOST}:{}", self.node(i)?.client_port))
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never: `start` refuses zero).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Kills node `i` with SIGKILL (no clean shutdown, as a crash) and reaps it.
    pub fn kill9(&self, i: usize) -> Result<()> {
        let node = self.node(i)?;
        let mut slot = node.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = slot.take() {
            child
                .kill()
                .ctx(|| format!("kill nats-server {}", node.name))?;
            let _ = child.wait();
        }
        Ok(())
    }

    /// Starts node `i` again (after [`NatsCluster::kill9`]) with its store, and waits until
    /// it is healthy.
    pub async fn restart(&self, i: usize) -> Result<()> {
        self.kill9(i)?;
        self.spawn(i)?;
        self.wait_healthy(i).await
    }

    /// The tail of node `i`'s log, for failure messages.
    pub fn log_tail(&self, i: usize) -> String {
        let Ok(node) = self.node(i) else {
            return String::new();
        };
        tail(&node.log, 4000)
    }

    async fn wait_healthy(&self, i: usize) -> Result<()> {
        let node = self.node(i)?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok((200, _)) = http_get(node.http_port, "/healthz") {
                return Ok(());
            }
            {
                let mut slot = node.child.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(child) = slot.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    slot.take();
                    return Err(Error::StartFailed {
                        reason: format!("nats-server {} exited with {status}", node.name),
                        log: tail(&node.log, 4000),
                    });
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "nats-server {} not healthy after {START_TIMEOUT:?}; log:\n{}",
                    node.name,
                    tail(&node.log, 4000)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until a running node reports a JetStream meta leader.
    pub async fn wait_for_meta_leader(&self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            for node in &self.nodes {
                if let Ok((200, body)) = http_get(node.http_port, "/jsz")
                    && let Ok(json) = serde_json::from_str::<serde_json::Value>(&body)
                    && json
                        .pointer("/meta_cluster/leader")
                        .and_then(|l| l.as_str())
                        .is_some_and(|l| !l.is_empty())
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(
                    "the NATS cluster elected no JetStream meta leader".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            let _ = self.kill9(i);
        }
        for node in &self.nodes {
            for port in [node.client_port, node.cluster_port, node.http_port] {
                release_port(port);
            }
        }
    }
}

/// A bounded GET on the monitoring port: (status, body).
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.take(1 << 20).read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn tail(path: &Path, bytes: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(bytes);
    String::from_utf8_lossy(&text[start..]).into_owned()
}
