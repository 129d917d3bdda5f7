//! Zero allocations per message in the steady state: a counting global allocator watches a
//! pair of connections exchange messages over the in-memory link after a warm-up, with and
//! without the Protocol Accelerator.

mod common;
use phyllo::testing::Pair;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread's allocations count: only the thread running the connections, not
    /// the test harness's own threads (a stray allocation there once failed this test).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTED.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn run(pair: &mut Pair, n: usize, payload: &[u8]) {
    for _ in 0..n {
        pair.a.send(pair.now, payload).unwrap();
        while pair.step() {
            while let Some(m) = pair.b.poll_delivery() {
                pair.b.recycle(m);
            }
        }
    }
}

fn steady_state_allocs(spec: &str, accel: bool, payload: &[u8]) -> u64 {
    COUNTED.with(|c| c.set(true));
    let mut pair = if accel {
        Pair::accelerated(spec, phyllo::testing::memlink::MemLink::perfect()).unwrap()
    } else {
        Pair::from_spec(spec).unwrap()
    };
    run(&mut pair, 2000, payload); // warm-up: pools, queues and windows reach their size
    let before = ALLOCS.load(Ordering::Relaxed);
    assert!(
        before > 0,
        "the counting allocator counts (set-up allocates)"
    );
    run(&mut pair, 10_000, payload);
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(pair.b.stats().delivered, 12_000);
    after - before
}

#[test]
fn zero_allocations_per_message_in_steady_state() {
    // One test function: the counter is global, so no other test may run concurrently here.
    for spec in [
        "frag(1400):window(16):checksum",
        "frag(1400):window(16):checksum:seal",
    ] {
        for (size, accel) in [8usize, 1000]
            .into_iter()
            .flat_map(|s| [(s, false), (s, true)])
        {
            let n = steady_state_allocs(spec, accel, &vec![7u8; size]);
            assert_eq!(
                n, 0,
                "{spec} (accelerator {accel}) with {size}-byte messages allocated {n} times"
            );
        }
    }
}
