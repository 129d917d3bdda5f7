//! Outlining (seed 000 §3.1, Mosberger et al.): rarely executed code moved off the hot path.
//!
//! The seed annotates an `if` with its expected outcome (`if (bad_case @ 0)`) and the compiler
//! emits the unlikely branch at the end of the function, so the common path runs straight
//! through without a taken jump and without loading the error handling into the i-cache. Here
//! the annotation is [`cold`], called first thing in a branch that is expected not to run
//! (error handling, initialisation, the retransmission and reassembly paths). It calls an
//! empty `#[cold]` function, which tells the compiler the branch is unlikely as
//! `core::hint::cold_path` does (that hint needs Rust 1.95; this works on the workspace's
//! minimum, 1.87), for the price of one call on the rare path.
//!
//! The layers the latency experiments measure are generic over a `const O: bool` that turns
//! the hints on, so one build holds both the standard code (STD: `O = false`, no hints) and the
//! outlined code (OUT: `O = true`), and the two are compared on the same binary.

/// Mark the branch this is called in as unlikely when `O` is set; nothing otherwise.
#[inline(always)]
pub fn cold<const O: bool>() {
    if O {
        rare();
    }
}

/// The cold call that marks a branch.
#[cold]
#[inline(never)]
fn rare() {}
