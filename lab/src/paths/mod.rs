//! Seed 000 (Mosberger et al., "Analysis of Techniques to Improve Protocol Processing
//! Latency"): two reference stacks and the six versions of its §4.1, so that outlining,
//! cloning with a bipartite layout and path-inlining can be measured on phyllo's own layers.
//!
//! - **Stacks** ([`StackKind`]): the short `tcp:ip:eth`, a few big layers like the seed's
//!   TCP/IP ([`tcpip`]), and the tall `xrpctest:mselect:vchan:chan:bid:blast:vnet:eth`, many
//!   small layers like its x-kernel RPC stack ([`rpc`]); both framed by [`frame`]'s `eth`.
//! - **Versions** ([`Version`]): STD is the dynamic stack (a virtual call per layer and phase)
//!   without outlining hints; OUT the same with the rare paths outlined
//!   ([`phyllo::outline`]); PIN the static stack ([`phyllo::stack!`]), which the compiler inlines
//!   into one function per phase and direction — the seed's path-inlining, done by the compiler
//!   — with outlining; CLO, BAD and ALL are OUT, OUT and PIN with a chosen function layout
//!   (bipartite, deliberately conflicting, bipartite), which is not code but a placement of it:
//!   the analyzer simulates it on the trace (`phyllo-analyze`'s virtual layouts) and the
//!   `paths` command can relink with it.
//!
//! - **Classifier** ([`classify`]): path-inlined code may only take datagrams of the path it
//!   assumes; a compact key, matched exactly, decides.
//!
//! Every version of a stack is the same protocol: the tests check that all of them put the
//! same datagrams on the wire and deliver the same messages, under faults too.

pub mod classify;
pub mod frame;
pub mod rpc;
pub mod tcpip;

use frame::Eth;
use phyllo::conn::{BuildError, Config, Connection};
use phyllo::fixed::Fixed;
use phyllo::layer::Role;
use phyllo::layers::{Frag, Ports, Window, WindowConfig};
use phyllo::stack::{DynStack, LayerSet};
use rpc::{Bid, MSelect, VChan, VNet, XrpcTest};
use tcpip::Ip;

/// Which reference stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackKind {
    /// `tcp:ip:eth`: a few big layers.
    Short,
    /// `xrpctest:mselect:vchan:chan:bid:blast:vnet:eth`: many small layers.
    Tall,
}

impl StackKind {
    /// Both, short first.
    pub const BOTH: [StackKind; 2] = [StackKind::Short, StackKind::Tall];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            StackKind::Short => "short (TCP/IP-like)",
            StackKind::Tall => "tall (RPC, x-kernel style)",
        }
    }

    /// Its layers, as a spec would list them.
    pub fn spec(self) -> &'static str {
        match self {
            StackKind::Short => "tcp:ip:eth",
            StackKind::Tall => "xrpctest:mselect:vchan:chan:bid:blast:vnet:eth",
        }
    }
}

/// The six versions of seed 000 §4.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// Dynamic stack, no hints.
    Std,
    /// STD with the rare paths outlined.
    Out,
    /// OUT with a bipartite function layout.
    Clo,
    /// OUT with a layout that makes the hot path conflict in a direct-mapped i-cache.
    Bad,
    /// OUT path-inlined: the static stack.
    Pin,
    /// PIN with a bipartite function layout.
    All,
}

/// How a version places its functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Where the linker puts them.
    Linker,
    /// Bipartite: path functions and library functions, each in invocation order.
    Bipartite,
    /// Chosen to conflict in a direct-mapped i-cache.
    Bad,
}

impl Version {
    /// All six, in the seed's table order.
    pub const ALL: [Version; 6] = [
        Version::Bad,
        Version::Std,
        Version::Out,
        Version::Clo,
        Version::Pin,
        Version::All,
    ];

    /// Its name in the seed.
    pub fn name(self) -> &'static str {
        match self {
            Version::Std => "STD",
            Version::Out => "OUT",
            Version::Clo => "CLO",
            Version::Bad => "BAD",
            Version::Pin => "PIN",
            Version::All => "ALL",
        }
    }

    /// Whether its rare paths are outlined.
    pub fn outlined(self) -> bool {
        self != Version::Std
    }

    /// Whether it runs the static, path-inlined stack.
    pub fn inlined(self) -> bool {
        matches!(self, Version::Pin | Version::All)
    }

    /// How it places its functions.
    pub fn placement(self) -> Placement {
        match self {
            Version::Clo | Version::All => Placement::Bipartite,
            Version::Bad => Placement::Bad,
            _ => Placement::Linker,
        }
    }

    /// The version whose code it runs (layouts aside): STD, OUT or PIN.
    pub fn code(self) -> Version {
        match self {
            Version::Std => Version::Std,
            Version::Out | Version::Clo | Version::Bad => Version::Out,
            Version::Pin | Version::All => Version::Pin,
        }
    }
}

/// The fragment size of `blast`.
pub const BLAST: usize = 1400;
/// The window of `tcp`.
pub const TCP_WINDOW: usize = 16;
/// The ports of `tcp`: the initiator's, the responder's.
pub const TCP_PORTS: (u16, u16) = (40_000, 7);

fn tcp<const O: bool>(role: Role) -> Window<O> {
    let (a, b) = TCP_PORTS;
    let (local, peer) = match role {
        Role::Initiator => (a, b),
        Role::Responder => (b, a),
    };
    Window::build(WindowConfig {
        name: "tcp",
        transport: Some(Ports { local, peer }),
        ..WindowConfig::new(TCP_WINDOW)
    })
}

fn chan<const O: bool>() -> Window<O> {
    // One call at a time per channel: a window of one.
    Window::build(WindowConfig {
        name: "chan",
        ..WindowConfig::new(1)
    })
}

/// The short stack, static (path-inlined) form, outlined.
pub type ShortPin = (Window<true>, (Ip<true>, (Eth<true>, ())));

/// The tall stack, static (path-inlined) form, outlined, with its header layout computed at
/// compile time ([`phyllo::fixed`]): every layer declares its fields, so field offsets and
/// masks are constants in the inlined path.
pub type TallPin = Fixed<(
    XrpcTest<true>,
    (
        MSelect<true>,
        (
            VChan<true>,
            (
                Window<true>,
                (Bid<true>, (Frag<true>, (VNet<true>, (Eth<true>, ())))),
            ),
        ),
    ),
)>;

/// The short stack, static form.
pub fn short_pin(role: Role) -> ShortPin {
    phyllo::stack!(tcp::<true>(role), Ip::new(), Eth::new())
}

/// The tall stack, static form.
pub fn tall_pin() -> TallPin {
    phyllo::fixed_stack!(
        XrpcTest::new(),
        MSelect::new(),
        VChan::new(),
        chan::<true>(),
        Bid::new(),
        Frag::build(BLAST).named("blast"),
        VNet::new(),
        Eth::new()
    )
}

/// A stack in dynamic form, outlined as `O` says.
pub fn dynamic<const O: bool>(kind: StackKind, role: Role) -> DynStack {
    match kind {
        StackKind::Short => vec![
            Box::new(tcp::<O>(role)),
            Box::new(Ip::<O>::new()),
            Box::new(Eth::<O>::new()),
        ],
        StackKind::Tall => vec![
            Box::new(XrpcTest::<O>::new()),
            Box::new(MSelect::<O>::new()),
            Box::new(VChan::<O>::new()),
            Box::new(chan::<O>()),
            Box::new(Bid::<O>::new()),
            Box::new(Frag::<O>::build(BLAST).named("blast")),
            Box::new(VNet::<O>::new()),
            Box::new(Eth::<O>::new()),
        ],
    }
}

/// Code to run on one version of a stack, whatever its type: [`with_stack`] calls
/// [`OnStack::run`] with a constructor of that version's connections, so the code is compiled
/// for each stack type (static stacks stay inlined).
pub trait OnStack {
    /// What the code returns.
    type Out;
    /// Run, building connections with `make` (one per end, from its configuration).
    fn run<S: LayerSet + Send + 'static, M: FnMut(Config) -> Result<Connection<S>, BuildError>>(
        self,
        make: M,
    ) -> Self::Out;
}

/// Run `w` on `kind` in `version`'s code: STD and OUT (and OUT's layouts CLO and BAD) on the
/// dynamic stack, PIN (and ALL) on the static one.
pub fn with_stack<W: OnStack>(kind: StackKind, version: Version, w: W) -> W::Out {
    match (version.code(), kind) {
        (Version::Std, _) => w.run(|c: Config| Connection::new(dynamic::<false>(kind, c.role), c)),
        (Version::Pin, StackKind::Short) => {
            w.run(|c: Config| Connection::new(short_pin(c.role), c))
        }
        (Version::Pin, StackKind::Tall) => w.run(|c: Config| Connection::new(tall_pin(), c)),
        _ => w.run(|c: Config| Connection::new(dynamic::<true>(kind, c.role), c)),
    }
}
