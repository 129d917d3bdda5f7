//! Seed 000's reference stacks (`phyllo_lab::paths`) and their classifier on arbitrary input:
//! datagrams (each prefixed with a one-byte length, with timer firings between) into every
//! code version of both stacks — nothing may panic — and each datagram through a classifier
//! learned from the first one long enough.
#![no_main]

use libfuzzer_sys::fuzz_target;
use phyllo::conn::BuildError;
use phyllo_lab::paths::classify::{flow_fields, Classifier};
use phyllo_lab::paths::{with_stack, OnStack, StackKind, Version};
use phyllo::{Config, Connection, LayerSet, Role, Time};

struct Feed<'a>(&'a [u8], StackKind);

impl OnStack for Feed<'_> {
    type Out = Result<(), BuildError>;
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        mut make: M,
    ) -> Self::Out {
        let mut c = make(Config::new(Role::Responder))?;
        let mut classifier: Option<Classifier> = None;
        let mut rest = self.0;
        let mut t = 0u64;
        while let Some((&len, tail)) = rest.split_first() {
            let n = (len as usize).min(tail.len());
            let (d, tail) = tail.split_at(n);
            rest = tail;
            t += 1_000_000;
            match &classifier {
                Some(k) => {
                    let _ = k.route(d);
                }
                None => classifier = Classifier::learn(c.layout(), flow_fields(self.1), d).ok(),
            }
            c.handle_datagram(Time(t), d);
            c.handle_timeout(Time(t));
            while let Some(m) = c.poll_delivery() {
                c.recycle(m);
            }
            while let Some(m) = c.poll_transmit() {
                c.recycle(m);
            }
        }
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    for kind in StackKind::BOTH {
        for v in [Version::Std, Version::Out, Version::Pin] {
            with_stack(kind, v, Feed(data, kind)).expect("the reference stacks build");
        }
    }
});
