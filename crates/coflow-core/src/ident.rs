//! Newtype identifiers, so that a machine index can never be passed where a coflow id is meant.

macro_rules! ident {
    ($(#[$meta:meta])* $name:ident($inner:ty)) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl $name {
            /// The raw value.
            pub const fn get(self) -> $inner {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }

        impl From<$inner> for $name {
            fn from(v: $inner) -> Self {
                Self(v)
            }
        }
    };
}

ident!(
    /// Identifies a coflow within one workload or one coordinator.
    CoflowId(u64)
);
ident!(
    /// A machine of the fabric, 0-based: index `i` owns ingress port `i` and egress port `i`.
    MachineId(u32)
);

impl MachineId {
    /// The machine index as a `usize`, for indexing per-machine tables.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}
ident!(
    /// One flow of the live system: one piece of data fetched by one get. Assigned by the coordinator.
    FlowId(u64)
);
