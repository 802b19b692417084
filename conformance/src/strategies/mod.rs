//! Proptest strategies and the small, printable specs they generate.
//!
//! Cases are generated as specs (kinds, indexes, strings) and turned into model values
//! by deterministic builders, so a shrunk failing case is short, readable and can be
//! replayed from its JSON form.
//!
//! - [`model`]: every message and part kind, as deterministic builders
//!   ([`model::message`], [`model::part`]) and as arbitrary values with unknown kinds
//!   and unknown fields ([`model::arb_message`], [`model::arb_part`], …).
//! - [`stream`]: valid AI-SDK model streams (text, reasoning, tools, steps, errors,
//!   aborts); [`expected`]: what a processor must have persisted after any prefix.
//! - [`history`]: histories with successful, failed, nested and tailed compactions.

mod arbitrary;
mod arbitrary_parts;
pub mod expected;
pub mod history;
pub mod model;
pub mod scaled;
pub mod stream;
