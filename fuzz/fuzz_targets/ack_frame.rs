//! The `window` layer's acknowledgement body (`phyllo::layers::sack`): arbitrary bytes either
//! parse into a frame that encodes back to the same bytes, or are refused with a reason.
//! Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::layers::sack::AckFrame;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = AckFrame::parse(data) {
        let mut out = vec![0; f.encoded_len()];
        f.write(&mut out);
        assert_eq!(out, data, "a parsed frame encodes to what it was parsed from");
        let mut prev = 0;
        for &(s, e) in f.ranges() {
            assert!(s > prev && s < e, "ranges ascend, apart and non-empty");
            prev = e;
        }
    }
});
