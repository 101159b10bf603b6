//! The kit's NATS servers: a single node and a three-node JetStream cluster start, answer
//! on their client ports, survive a node's `kill -9` and restart.

use std::net::TcpStream;
use std::time::Duration;

use cdc_testkit::NatsCluster;

fn answers(url: &str) -> bool {
    let addr = url.trim_start_matches("nats://");
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 4];
    std::io::Read::read_exact(&mut stream, &mut buf).is_ok() && &buf == b"INFO"
}

#[tokio::test]
async fn a_single_node_and_a_three_node_cluster_start_and_survive_a_kill() {
    let single = NatsCluster::single().await.expect("single node");
    assert!(answers(&single.node_url(0).unwrap()));

    let cluster = NatsCluster::start(3).await.expect("three nodes");
    assert_eq!(cluster.url().split(',').count(), 3);
    cluster.kill9(1).unwrap();
    assert!(
        !answers(&cluster.node_url(1).unwrap()),
        "killed node still answers"
    );
    cluster
        .wait_for_meta_leader()
        .await
        .expect("a leader among the survivors");
    cluster.restart(1).await.expect("restart with its store");
    assert!(
        answers(&cluster.node_url(1).unwrap()),
        "{}",
        cluster.log_tail(1)
    );
    cluster
        .wait_for_meta_leader()
        .await
        .expect("a leader with all three back");
}
