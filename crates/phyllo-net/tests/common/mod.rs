//! What the tests that run the examples as processes share: finding an example's binary,
//! killing a child that outlives its test, and a child's output within a time limit.

use std::path::PathBuf;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// An example's binary: cargo puts them in `examples/` beside the `deps/` directory this test
/// runs from.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} not built: run `cargo test -p phyllo-net` (which builds the examples)",
        path.display()
    );
    path
}

/// A process killed when dropped, so a failing test leaves no server behind.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The output of `child` once it exits; panics (killing it) if that takes longer than `limit`.
pub fn output_within(child: Child, limit: Duration) -> Output {
    let mut child = Killed(child);
    let until = Instant::now() + limit;
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // It has exited (dropping `child` kills nothing): its output, which fits in the pipes.
    let c = &mut child.0;
    Output {
        status: c.wait().unwrap(),
        stdout: std::io::read_to_string(c.stdout.take().unwrap())
            .unwrap()
            .into_bytes(),
        stderr: std::io::read_to_string(c.stderr.take().unwrap())
            .unwrap()
            .into_bytes(),
    }
}
