//! The built-in layers (DESIGN.md §1): `window`, `frag`, `checksum`, `seal`.

mod checksum;
mod frag;
mod seal;
mod window;

pub use checksum::{covered_checksum, fold16, ones_sum_le, Checksum};
pub use frag::Frag;
pub use seal::Seal;
pub use window::Window;
