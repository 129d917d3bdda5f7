use phyllo::testing::memlink::Faults;
use phyllo::testing::Pair;
use std::time::Duration;

#[test]
fn scratch() {
    for (spec, len) in [("frag(1400):window(bbr):seal", 8192), ("frag(1400):window(bbr):seal", 1300), ("frag(1400):window:seal", 8192)] {
        let mut f = Faults::none(Duration::from_millis(25));
        f.loss = 0.01;
        let mut p = Pair::with_faults(spec, f, 1).unwrap();
        let total = 40_000_000 / len;
        let mut next = 0;
        let mut got = 0;
        while got < total && p.now.0 < 60_000_000_000 {
            while next < total && p.a.send(p.now, &vec![7u8; len]).is_ok() {
                next += 1;
            }
            while let Some(m) = p.b.poll_delivery() {
                got += 1;
                p.b.recycle(m);
            }
            p.step();
        }
        eprintln!("{spec} {len}: got {got}/{total} in {:?} => {:.2} MB/s; {:?}", p.now, (got * len) as f64 / (p.now.0 as f64 / 1e9) / 1e6, p.a.stats().layers[1]);
    }
}
