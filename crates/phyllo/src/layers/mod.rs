//! The built-in layers: `window`, `frag`, `checksum`, `seal`.

mod checksum;
mod frag;
pub mod gcm;
mod seal;
pub mod sack;
pub mod window;

pub use checksum::Checksum;
pub use frag::Frag;
pub use seal::{Cipher, Seal};
pub use window::{Ports, Window, WindowConfig};
