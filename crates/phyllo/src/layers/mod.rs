//! The built-in layers: `window`, `frag`, `checksum`, `seal`.

mod checksum;
mod clmul;
mod frag;
pub mod gcm;
pub mod sack;
mod seal;
pub mod window;

pub use checksum::Checksum;
pub use frag::Frag;
pub use seal::{Cipher, Seal};
pub use window::{Ports, Window, WindowConfig};
