//! The attack on a live session endpoint (`phyllo_lab::attack`): recorded traffic mutated,
//! replayed and forged, and a spoofed handshake flood, lose no established session — layered
//! and accelerated.

use phyllo_lab::attack::{self, AttackConfig};

#[test]
fn the_attack_loses_no_session() {
    for accel in [false, true] {
        let r = attack::run(&AttackConfig::new(accel)).unwrap();
        assert_eq!(r.sessions, 4, "{r:?}");
        assert_eq!(r.sessions_lost, 0, "accel {accel}: {r:?}");
        assert!(r.newcomer_established, "accel {accel}: {r:?}");
        assert!(
            r.cookie_replies > 0,
            "the flood put the server under load: {r:?}"
        );
        assert_eq!(r.after.0, r.after.1, "{r:?}");
        let drops: u64 = r.server_drops.iter().map(|(_, n)| n).sum();
        assert!(drops > 10_000, "{r:?}");
    }
}
