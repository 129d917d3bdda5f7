//! What the tests of two session sockets in one process share: the handshake between them.

use phyllo::{PeerId, PublicKey};
use phyllo_net::SessionSocket;
use std::time::{Duration, Instant};

/// Connect `client` to `server`, whose key is `server_key`: pump the client and let `serve`
/// take the server's turn until the session is up (at most 10 s, or the test fails).
pub fn establish(
    client: &mut SessionSocket,
    server: &mut SessionSocket,
    server_key: PublicKey,
    mut serve: impl FnMut(&mut SessionSocket),
) -> PeerId {
    let now = client.now();
    let peer = client
        .endpoint_mut()
        .connect(now, server_key, server.local_addr());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !client.endpoint().is_established(peer) {
        assert!(Instant::now() < deadline, "no session");
        client.pump(Duration::from_millis(1)).unwrap();
        serve(server);
    }
    peer
}
